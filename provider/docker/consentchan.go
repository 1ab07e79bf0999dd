//go:build linux

package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/provider"
)

// The consent channel (provider.ConsentChannel, PeerResolver): corral's
// init listens on 127.0.0.1:provider.ConsentPort in the container's
// network namespace (network none or proxy) and forwards each connection
// to ConsentSocket, the state dir's consent.sock, beginning with one line
// that names the client's address as accept(2) gave it (peerLine). Only
// init may connect there (its host pid by SO_PEERCRED, the current one
// after a docker restart): the line is init's word, never the workload's.
// ConsentListener hands out those connections with the client's address
// as their RemoteAddr; ConsentPeer finds the process from the kernel's
// tables (internal/grants.TCPPeer: the container's /proc/net/tcp, then
// its processes' fds), never from the request. Landlock lets every exec
// connect to the port (ShimSpec.Landlock.ConnectPorts) and
// provider.ConsentURLEnv names it.

// peerPrefix begins the line init sends first on a consent connection.
const peerPrefix = "CORRAL-PEER "

// peerLine is that line for addr: "CORRAL-PEER 127.0.0.1:54321\n".
func peerLine(addr net.Addr) string { return peerPrefix + addr.String() + "\n" }

// preambleTimeout bounds how long the supervisor waits for init's line.
const preambleTimeout = 5 * time.Second

// consentListener is the host side of the consent channel.
type consentListener struct {
	l      *net.UnixListener
	isInit func(pid int) bool
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	start1 sync.Once
}

func newConsentListener(l *net.UnixListener, isInit func(int) bool) *consentListener {
	return &consentListener{l: l, isInit: isInit, conns: make(chan net.Conn), done: make(chan struct{})}
}

// start accepts in the background: a connection not from init is closed
// at once; one whose line does not come within preambleTimeout too.
func (c *consentListener) start() {
	c.start1.Do(func() {
		go func() {
			for {
				u, err := c.l.AcceptUnix()
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					select {
					case <-c.done:
						return
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if pid := peerPID(u); pid <= 0 || !c.isInit(pid) {
					u.Close()
					continue
				}
				go c.greet(u)
			}
		}()
	})
}

// greet reads init's line and queues the connection for Accept.
func (c *consentListener) greet(u *net.UnixConn) {
	_ = u.SetReadDeadline(time.Now().Add(preambleTimeout))
	br := bufio.NewReaderSize(u, 128)
	line, err := br.ReadString('\n')
	_ = u.SetReadDeadline(time.Time{})
	addr, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), peerPrefix)
	peer, perr := net.ResolveTCPAddr("tcp", addr)
	if err != nil || !ok || perr != nil || peer.IP == nil {
		u.Close()
		return
	}
	conn := &consentConn{UnixConn: u, r: br, peer: peer, local: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: provider.ConsentPort}}
	select {
	case c.conns <- conn:
	case <-c.done:
		u.Close()
	}
}

// Accept returns the next connection from inside; net.ErrClosed once
// closed.
func (c *consentListener) Accept() (net.Conn, error) {
	select {
	case conn := <-c.conns:
		return conn, nil
	case <-c.done:
		return nil, net.ErrClosed
	}
}

func (c *consentListener) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.l.Close()
	})
	return nil
}

// Addr is the address inside: 127.0.0.1:provider.ConsentPort.
func (c *consentListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: provider.ConsentPort}
}

// consentConn is one consent connection: its bytes after init's line,
// its addresses those inside the container.
type consentConn struct {
	*net.UnixConn
	r           *bufio.Reader
	peer, local *net.TCPAddr
}

func (c *consentConn) Read(b []byte) (int, error) { return c.r.Read(b) }
func (c *consentConn) RemoteAddr() net.Addr       { return c.peer }
func (c *consentConn) LocalAddr() net.Addr        { return c.local }

// ConsentListener is the consent channel's listener (connections to
// 127.0.0.1:provider.ConsentPort inside the container), nil without one
// (provider.ConsentChannel).
func (s *Sandbox) ConsentListener() net.Listener {
	if s.consent == nil {
		return nil
	}
	return s.consent
}

// ConsentPeer names the process behind c, a connection ConsentListener
// accepted (provider.PeerResolver): its host pid and executable, from the
// container's TCP table and its processes' fds; ok false when c is not
// one of them, the client is gone, or several processes share its socket.
func (s *Sandbox) ConsentPeer(c net.Conn) (int, string, bool) {
	cc, ok := c.(*consentConn)
	if !ok {
		return 0, "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pid, err := s.currentInit(ctx)
	if err != nil {
		return 0, "", false
	}
	return grants.TCPPeer(pid, cc.peer, cc.local)
}

// isInit reports whether host pid is the container's init: the one Start
// saw, or, after a docker restart, the daemon's State.Pid now.
func (s *Sandbox) isInit(pid int) bool {
	if pid == s.initPID {
		return true
	}
	if !pidOneInside(pid) {
		return false // a workload's process: no daemon call for it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now, err := s.currentInit(ctx)
	return err == nil && now == pid
}

// pidOneInside reports whether host pid is PID 1 of its own pid namespace
// (the last NSpid of /proc/PID/status, proc(5)).
func pidOneInside(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			return len(f) > 1 && f[len(f)-1] == "1"
		}
	}
	return false
}
