//go:build linux

package linux

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DialServed connects to port on a persistent sandbox's own loopback
// (provider.PortDialer, for corral sandbox forward): the supervisor's
// dial asks init for a socket of the sandbox's network namespace
// (socketFactory) and connects it, outside the workload's Landlock
// domain, then hands it over. Errors wrap the connect's errno
// (ECONNREFUSED while nothing listens), or say the sandbox is gone.
func (s *persistent) DialServed(port int, timeout time.Duration) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", port)
	}
	r, fds, err := s.call(persistReq{Op: "dial", Port: port, TimeoutMS: timeout.Milliseconds()}, nil)
	if err != nil {
		if !s.supervisor().Alive() {
			return nil, fmt.Errorf("linux: sandbox %s is gone (its supervisor ended)", s.id)
		}
		return nil, fmt.Errorf("linux: sandbox %s: supervisor: %w", s.id, err)
	}
	if err := r.err(); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		if r.Errno != 0 {
			return nil, fmt.Errorf("linux: sandbox %s: 127.0.0.1:%d: %w", s.id, port, syscall.Errno(r.Errno))
		}
		return nil, err
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("linux: sandbox %s: the supervisor's dial carried %d sockets, not one", s.id, len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "served")
	defer f.Close()
	return net.FileConn(f)
}
