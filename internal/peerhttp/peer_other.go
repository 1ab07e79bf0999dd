//go:build !linux && !windows

package peerhttp

import (
	"context"
	"fmt"
	"net"
	"net/http"
)

// connPeer: no peer identity on other systems (TCP only).
func connPeer(ctx context.Context, _ net.Conn) context.Context { return ctx }

// LocalForm: no local endpoint on other systems.
const LocalForm = "a TCP address (no local endpoints here)"

// Superuser: no local endpoint, nobody.
const Superuser = "nobody"

func listenLocal(scheme, _ string) (net.Listener, error) {
	return nil, fmt.Errorf("%s endpoints are not on this OS", scheme)
}

func dialLocal(_ context.Context, scheme, _ string) (net.Conn, error) {
	return nil, fmt.Errorf("%s endpoints are not on this OS", scheme)
}

func localPeer(*http.Request) (string, bool, bool) { return "", false, false }
