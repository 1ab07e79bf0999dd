//go:build linux

// Package peerhttp serves HTTP on unix sockets whose clients are known by
// their uid (SO_PEERCRED, unix(7)): the gateway's API, and the approvers'
// consent API of a `corral run` or a service supervisor.
package peerhttp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/trust"
)

// ListenUnix listens on a unix socket at path, made 0600 in a 0700
// directory; a stale socket there is replaced, a live one (another
// server answers) or a file that is not a socket is an error. Missing
// directories above the socket's own are made 0711 (trust.ParentPerm).
func ListenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Dir(dir), trust.ParentPerm); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another server is listening there", path)
		}
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	return l, os.Chmod(path, 0o600)
}

type peerKey struct{}

// PeerUID is the uid of the peer of r's connection when it came over a
// unix socket served by Serve (-1 when the kernel did not say); ok false
// on TCP.
func PeerUID(r *http.Request) (uid int, ok bool) {
	uid, ok = r.Context().Value(peerKey{}).(int)
	return uid, ok
}

// Allowed reports whether a peer of uid may use this process's API: its
// own uid or root.
func Allowed(uid int) bool { return uid == os.Getuid() || uid == 0 }

// OwnerOnly lets a request reach h only over a unix socket from an
// Allowed uid: 403 otherwise (TCP included).
func OwnerOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uid, ok := PeerUID(r); !ok || !Allowed(uid) {
			http.Error(w, fmt.Sprintf("uid %d may not use this socket (only uid %d and root)", uid, os.Getuid()), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Serve serves h on l (HTTP/1.1 and cleartext HTTP/2, so gRPC clients
// work too) until ctx ends, then lets the calls under way finish for up to
// 30 s. A unix connection's peer uid is on each request (PeerUID).
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if uc, ok := c.(*net.UnixConn); ok {
				if uid, ok := peerUID(uc); ok {
					return context.WithValue(ctx, peerKey{}, uid)
				}
				return context.WithValue(ctx, peerKey{}, -1)
			}
			return ctx
		}}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true) // over TLS (the listener's)
	srv.Protocols.SetUnencryptedHTTP2(true)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-drained
	return nil
}

func peerUID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}

// EndWith is h with each request's context ending when ctx ends too: a
// long stream (an approvers' watch) then ends with its server, whose
// shutdown would otherwise wait for it (Serve's 30 s).
func EndWith(ctx context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc, end := context.WithCancel(r.Context())
		defer end()
		defer context.AfterFunc(ctx, end)()
		h.ServeHTTP(w, r.WithContext(rc))
	})
}
