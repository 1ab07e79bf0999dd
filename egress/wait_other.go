//go:build !unix

package egress

import "syscall"

func waitReadable(rc syscall.RawConn) error { return nil }
