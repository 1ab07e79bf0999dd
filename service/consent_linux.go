//go:build linux

package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/corral-sandbox/corral/consent/web"
	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/provider"

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
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = peerhttp.Serve(ctx, l, peerhttp.EndWith(ctx, peerhttp.OwnerOnly(api)))
	}()
	var wl net.Listener
	if addr := s.st.Web; addr != "" {
		if wl, err = s.serveWeb(ctx, &wg, addr); err != nil {
			cancel()
			_ = l.Close()
			wg.Wait()
			_ = os.Remove(path)
			return nil, err
		}
	}
	return func() {
		cancel()
		_ = l.Close()
		if wl != nil {
			_ = wl.Close()
		}
		wg.Wait()
		_ = os.Remove(path)
		_ = os.Remove(s.p.WebToken())
	}, nil
}

// serveWeb serves the consent web page of the session on loopback addr,
// behind a fresh random token written to Paths.WebToken (0600, replaced
// atomically).
func (s *supervisor) serveWeb(ctx context.Context, wg *sync.WaitGroup, addr string) (net.Listener, error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	if err := atomicfile.Write(s.p.WebToken(), []byte(token+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("consent web page: token: %w", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &provider.Error{Code: provider.CodeStartFailed, Msg: fmt.Sprintf("--web %s: %v", addr, err)}
	}
	api := consent.ApproverHandler(s.hub, func(*http.Request) string { return "web page (token)" })
	src := web.SourceFunc(func(context.Context) ([]web.Sandbox, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return []web.Sandbox{{ID: s.status.SandboxID, Name: s.rec.Name, Provider: "linux", State: string(s.status.State), Layers: s.status.Layers}}, nil
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = peerhttp.Serve(ctx, l, peerhttp.EndWith(ctx, web.Handler(src, api, token)))
	}()
	s.logf("consent web page: http://%s/ui/?token=$(cat %s)", l.Addr(), s.p.WebToken())
	return l, nil
}
