//go:build unix

package egress

import "syscall"

// waitReadable blocks (honouring the read deadline) until src has data, EOF
// or an error pending, without consuming anything.
func waitReadable(rc syscall.RawConn) error {
	return rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	})
}
