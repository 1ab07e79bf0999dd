package peerhttp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
)

// Local endpoint addresses: "unix:PATH" (a unix socket, Linux) and
// "pipe:NAME" (the named pipe \\.\pipe\NAME, Windows).
const (
	UnixScheme = "unix:"
	PipeScheme = "pipe:"
)

// IsLocal reports whether addr names a local endpoint (unix: or pipe:),
// whose clients the OS identifies, rather than a TCP address.
func IsLocal(addr string) bool {
	return strings.HasPrefix(addr, UnixScheme) || strings.HasPrefix(addr, PipeScheme)
}

// CheckLocal reports whether the local endpoint addr is well-formed and
// of this OS (the error says which form is).
func CheckLocal(addr string) error {
	_, _, err := splitLocal(addr)
	return err
}

// ListenLocal listens on the local endpoint addr: ListenUnix for
// "unix:PATH" on Linux, ListenPipe for "pipe:NAME" on Windows. Another
// scheme, or one this OS does not have, is an error naming the one it has.
func ListenLocal(addr string) (net.Listener, error) {
	scheme, rest, err := splitLocal(addr)
	if err != nil {
		return nil, err
	}
	return listenLocal(scheme, rest)
}

// DialLocal connects to the local endpoint addr (ListenLocal's forms;
// DialPipe's owner check on Windows).
func DialLocal(ctx context.Context, addr string) (net.Conn, error) {
	scheme, rest, err := splitLocal(addr)
	if err != nil {
		return nil, err
	}
	return dialLocal(ctx, scheme, rest)
}

func splitLocal(addr string) (scheme, rest string, err error) {
	for _, s := range []string{UnixScheme, PipeScheme} {
		r, ok := strings.CutPrefix(addr, s)
		switch {
		case !ok:
			continue
		case !strings.HasPrefix(LocalForm, s):
			return "", "", fmt.Errorf("address %q: no %s endpoints on %s; use %s", addr, s, runtime.GOOS, LocalForm)
		case r == "":
			return "", "", fmt.Errorf("address %q: want %s", addr, LocalForm)
		}
		return s, r, nil
	}
	return "", "", fmt.Errorf("address %q: want %s", addr, LocalForm)
}

// LocalPeer is the client of r's connection when it came over a local
// endpoint served by Serve: who names it ("uid 1000", a SID), allowed
// says whether it may use this process's API (Allowed, AllowedPipePeer);
// ok is false on TCP.
func LocalPeer(r *http.Request) (who string, allowed, ok bool) { return localPeer(r) }
