//go:build !linux

package main

import (
	"errors"
	"io"
	"os"

	"github.com/corral-sandbox/corral/session"
)

// ttyPrompt is Linux's (consent_linux.go).
type ttyPrompt struct{ Stdin *os.File }

func newTTYPrompt(in *os.File, out io.Writer) (*ttyPrompt, error) {
	return nil, errors.New("consent prompts: Linux only")
}

// serveRunConsent: no provider here takes live grants (mxc: docs/consent.md).
func serveRunConsent(sess *session.Session, prompt *ttyPrompt) (func(), error) {
	if sess.Consent() != nil {
		return nil, errors.New("consent: corral run serves approvals on Linux only")
	}
	return func() {}, nil
}
