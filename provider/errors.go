package provider

import (
	"errors"
	"fmt"
	"strings"

	"github.com/corral-sandbox/corral/policy"
)

// Code is a stable failure code. The set is closed: every error a provider
// returns carries exactly one of these.
type Code string

const (
	CodeUnavailable     Code = "unavailable"      // provider or a required layer missing on this host
	CodePolicyRejected  Code = "policy_rejected"  // policy invalid or not enforceable; never retried elsewhere
	CodeProvisionFailed Code = "provision_failed" // creating resources failed
	CodeStartFailed     Code = "start_failed"     // bringing the sandbox up failed (a layer could not be applied)
	CodeExecFailed      Code = "exec_failed"      // the workload could not be started
	CodeStopFailed      Code = "stop_failed"      // stopping or cleaning up failed
	CodeNotFound        Code = "not_found"        // no such sandbox or resource
	CodeStale           Code = "stale"            // state changed underneath (compare-and-swap lost)
	CodeTimeout         Code = "timeout"          // an operation's deadline passed
	CodeInternal        Code = "internal"         // a bug
	CodePlanted         Code = "planted"          // the workload left files that run code later (corral run --strict-tree)
)

// exitCodes maps each Code to the exit status of the corral command. They
// sit below 128 so they cannot be confused with 128+signal exits, and clear
// of 1 and 2, which ordinary tools and usage errors use. 124 follows
// timeout(1); 125 and 127 follow env(1), chroot(1) and docker run ("could
// not start", "command not found"). Documented in docs/exit-codes.md.
var exitCodes = map[Code]int{
	CodePlanted:         116,
	CodeStale:           117,
	CodeNotFound:        118,
	CodeStopFailed:      119,
	CodeInternal:        120,
	CodeUnavailable:     121,
	CodePolicyRejected:  122,
	CodeProvisionFailed: 123,
	CodeTimeout:         124,
	CodeStartFailed:     125,
	CodeExecFailed:      127,
}

// ExitCode returns the documented exit status for c.
func (c Code) ExitCode() int {
	if n, ok := exitCodes[c]; ok {
		return n
	}
	return exitCodes[CodeInternal]
}

// Error is a provider failure with a stable code.
type Error struct {
	Code  Code
	Layer string // the layer that failed, if any
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Layer != "" {
		b.WriteString(": layer " + e.Layer)
	}
	if e.Msg != "" {
		b.WriteString(": " + e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error with code that keeps err as its cause
// (errors.Is and errors.As see it); msg, when not empty, says what was
// being done ("docker: create container").
func Wrap(code Code, msg string, err error) *Error {
	return &Error{Code: code, Msg: msg, Err: err}
}

// LayerError reports that a layer could not be applied.
func LayerError(code Code, layer string, err error) *Error {
	return &Error{Code: code, Layer: layer, Err: err}
}

// Rejected builds the policy_rejected error for a loss report's errors.
func Rejected(r LossReport) *Error {
	var msgs []string
	for _, l := range r.Errors() {
		msgs = append(msgs, fmt.Sprintf("%s: %s", l.Field, l.Message))
	}
	return &Error{Code: CodePolicyRejected, Msg: strings.Join(msgs, "; ")}
}

// RejectedIn is Rejected with each error placed in p's file
// (file:line:col of its field, policy.Policy.Position) when it has one;
// p may be nil.
func RejectedIn(p *policy.Policy, r LossReport) *Error {
	var msgs []string
	for _, l := range r.Errors() {
		m := l.Field + ": " + l.Message
		if p != nil {
			if pos := p.Position(l.Field); pos != "" {
				m = pos + ": " + m
			}
		}
		msgs = append(msgs, m)
	}
	return &Error{Code: CodePolicyRejected, Msg: strings.Join(msgs, "\n  ")}
}

// CodeOf returns the Code of err, CodeInternal when err carries none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
