//go:build linux

package peerhttp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/trust"
)

// ListenUnix listens on a unix socket at path, made 0600 in a 0700
// directory; a stale socket there is replaced, a live one (another
// server answers) or a file that is not a socket is an error. Missing
// directories above the socket's own are made 0711 (trust.Mkdir).
func ListenUnix(path string) (net.Listener, error) {
	if err := trust.Mkdir(filepath.Dir(path), 0o700); err != nil {
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

// connPeer puts a unix connection's peer uid (-1 when the kernel did not
// say) in its context (Serve's ConnContext).
func connPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	if uid, ok := peerUID(uc); ok {
		return context.WithValue(ctx, peerKey{}, uid)
	}
	return context.WithValue(ctx, peerKey{}, -1)
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

// LocalForm is the local endpoint address this OS has.
const LocalForm = "unix:PATH"

// Superuser names who, besides the server's own user, may use a local
// endpoint (Allowed).
const Superuser = "root"

func listenLocal(_, path string) (net.Listener, error) { return ListenUnix(path) }

func dialLocal(ctx context.Context, _, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

func localPeer(r *http.Request) (who string, allowed, ok bool) {
	uid, ok := PeerUID(r)
	return fmt.Sprintf("uid %d", uid), ok && Allowed(uid), ok
}
