//go:build !linux && !windows

package peerhttp

import (
	"context"
	"net"
)

// connPeer: no peer identity on other systems (TCP only).
func connPeer(ctx context.Context, _ net.Conn) context.Context { return ctx }
