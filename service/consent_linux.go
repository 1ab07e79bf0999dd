//go:build linux

package service

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/internal/peerhttp"
)

// serveApprovals serves the approvers' consent API of the session's runs
// (each run's broker joins s.hub while it lives) on Paths.Approvals, for
// the supervisor's uid and root (peerhttp.OwnerOnly). stop ends it and
// removes the socket.
func (s *supervisor) serveApprovals() (stop func(), err error) {
	path := s.p.Approvals()
	l, err := peerhttp.ListenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("consent: approvals socket: %w", err)
	}
	api := consent.ApproverHandler(s.hub, func(r *http.Request) string {
		if uid, ok := peerhttp.PeerUID(r); ok {
			return fmt.Sprintf("uid %d", uid)
		}
		return "unknown"
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = peerhttp.Serve(ctx, l, peerhttp.OwnerOnly(api))
	}()
	return func() {
		cancel()
		_ = l.Close()
		<-done
		_ = os.Remove(path)
	}, nil
}
