//go:build linux

package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/headbuf"
)

// ConnectArg is the hidden subcommand DialServed runs in the container:
// corral's binary connects to 127.0.0.1:PORT there (the container has no
// network of its own to reach from outside) and pipes its stdin and
// stdout to the connection.
const ConnectArg = "__docker-connect"

// The status line ConnectMain writes before any byte of the connection:
// connectOK, connectRefused, or connectErr and a reason.
const (
	connectOK      = "corral-connect ok"
	connectRefused = "corral-connect refused"
	connectErr     = "corral-connect error "
	maxStatus      = 256 // bytes, with the newline
)

// ConnectMain is ConnectArg: args is [PORT]. It connects to
// 127.0.0.1:PORT in the container's network namespace, writes one status
// line to stdout, then copies stdin to the connection (half-closing it at
// stdin's end) and the connection to stdout, and exits when both are
// done. It runs as connectUser (never the workload's uid) with the
// container's confinement, outside corral's exec shim: it reaches the port on the gateway's
// behalf, so the workload's Landlock TCP rule is not its. It never
// returns.
func ConnectMain(args []string) {
	status := func(line string) { _, _ = os.Stdout.WriteString(line + "\n") }
	if len(args) != 1 {
		status(connectErr + "usage: " + ConnectArg + " PORT")
		os.Exit(2)
	}
	port, err := strconv.Atoi(args[0])
	if err != nil || port < 1 || port > 65535 {
		status(connectErr + "bad port " + strconv.Quote(args[0]))
		os.Exit(2)
	}
	c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
	if errors.Is(err, syscall.ECONNREFUSED) {
		status(connectRefused)
		os.Exit(1)
	}
	if err != nil {
		status(connectErr + err.Error())
		os.Exit(1)
	}
	status(connectOK)
	in := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, os.Stdin)
		_ = c.(*net.TCPConn).CloseWrite()
		close(in)
	}()
	_, _ = io.Copy(os.Stdout, c)
	os.Stdout.Close()
	<-in
	os.Exit(0)
}

// connectUser is the uid:gid the connect helper runs as: nobody's
// (65534), or 65533 when the workload itself runs as nobody
// (internal/identity's fallback) — never the workload's.
func connectUser(workloadUID int) string {
	id := 65534
	if workloadUID == id {
		id--
	}
	return fmt.Sprintf("%d:%d", id, id)
}

// DialServed connects to port on the container's own loopback through
// the daemon: a docker exec of ConnectArg, its stdin and stdout (the
// exec's hijacked stream) carrying the connection. It gives up after
// timeout; a port nobody listens on is an error wrapping ECONNREFUSED.
// Closing the connection ends the exec.
func (s *Sandbox) DialServed(port int, timeout time.Duration) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ex, err := s.cli.ExecCreate(ctx, s.cid, client.ExecCreateOptions{
		// Not the workload's uid: the helper runs outside the exec shim
		// (its Landlock would refuse the connect), so a workload of the
		// same uid could open its /proc/PID/mem and run code without the
		// shim's layers; another uid needs CAP_SYS_PTRACE, which the
		// container does not have.
		User:        connectUser(s.spec.UID),
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{BinPath, ConnectArg, strconv.Itoa(port)},
	})
	if err != nil {
		return nil, fmt.Errorf("docker sandbox %s: exec: %w", s.id, err)
	}
	att, err := s.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker sandbox %s: exec attach: %w", s.id, err)
	}
	// The stream multiplexes the exec's stdout (the connection) and
	// stderr (kept, bounded, for an error's message).
	pr, pw := io.Pipe()
	stderr := headbuf.New(4 << 10)
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, att.Reader)
		pw.CloseWithError(err)
	}()
	_ = att.Conn.SetReadDeadline(time.Now().Add(timeout))
	r := bufio.NewReaderSize(pr, maxStatus)
	line, err := r.ReadSlice('\n')
	_ = att.Conn.SetReadDeadline(time.Time{})
	c := &execConn{Conn: att.Conn, r: r, att: att.HijackedResponse, s: s, exec: ex.ID, port: port}
	switch st := strings.TrimSuffix(string(line), "\n"); {
	case err != nil:
		c.Close()
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("docker sandbox %s: port %d: the connect helper said nothing: %s", s.id, port, msg)
	case st == connectOK:
		return c, nil
	case st == connectRefused:
		c.Close()
		return nil, fmt.Errorf("docker sandbox %s: 127.0.0.1:%d: %w", s.id, port, syscall.ECONNREFUSED)
	case strings.HasPrefix(st, connectErr):
		c.Close()
		return nil, fmt.Errorf("docker sandbox %s: port %d: %s", s.id, port, strings.TrimPrefix(st, connectErr))
	default:
		c.Close()
		return nil, fmt.Errorf("docker sandbox %s: port %d: the connect helper's status %q is not one it sends", s.id, port, st)
	}
}

// execConn is a connection carried by a docker exec's hijacked stream.
type execConn struct {
	net.Conn // the stream: writes go to the exec's stdin
	r        *bufio.Reader
	att      client.HijackedResponse
	s        *Sandbox
	exec     string
	port     int
}

func (c *execConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite ends the exec's stdin: the helper half-closes the connection.
func (c *execConn) CloseWrite() error { return c.att.CloseWrite() }

func (c *execConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: c.port}
}

// Close closes the stream and kills the helper if it still runs (a peer
// that never closes its side would keep it).
func (c *execConn) Close() error {
	err := c.att.Conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if in, ierr := c.s.cli.ExecInspect(ctx, c.exec, client.ExecInspectOptions{}); ierr == nil && in.Running && in.PID > 0 {
		_ = unix.Kill(in.PID, unix.SIGKILL)
	}
	return err
}
