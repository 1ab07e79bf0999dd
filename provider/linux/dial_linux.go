//go:build linux

package linux

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// DialServed connects to port on a persistent sandbox's own loopback
// (provider.PortDialer, for corral sandbox forward): the socket is made
// in init's network namespace by a thread of this process that enters it
// (setns(2): root, or the user that owns the sandbox's user namespace),
// then connected from here, so nothing inside the sandbox takes part and
// no Landlock rule of the workload's applies. Errors are the connect's
// (ECONNREFUSED while nothing listens), or say the sandbox is gone.
func (s *persistent) DialServed(port int, timeout time.Duration) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", port)
	}
	s.mu.Lock()
	init := s.init
	s.mu.Unlock()
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", init.PID))
	if err != nil || !init.Alive() { // alive after the open: the namespace is init's, not a reused pid's
		if err == nil {
			ns.Close()
		}
		return nil, fmt.Errorf("linux: sandbox %s is not running", s.id)
	}
	defer ns.Close()
	fd, err := socketIn(int(ns.Fd()))
	if err != nil {
		return nil, fmt.Errorf("linux: sandbox %s: a socket in its network namespace: %w", s.id, err)
	}
	f := os.NewFile(uintptr(fd), "served")
	defer f.Close()
	if err := connectTimeout(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}, timeout); err != nil {
		return nil, fmt.Errorf("linux: sandbox %s: 127.0.0.1:%d: %w", s.id, port, err)
	}
	return net.FileConn(f)
}

// socketIn makes a TCP socket in the network namespace ns
// (an open /proc/PID/ns/net) on a locked thread that enters it and comes
// back; a thread that cannot come back is never reused (it stays locked
// and ends with the goroutine).
func socketIn(ns int) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{-1, err}
			return // the thread ends locked: discarded
		}
		defer self.Close()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, fmt.Errorf("setns: %w", err)}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}
