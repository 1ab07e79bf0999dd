package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// DefaultWaitTimeout bounds Start's wait for the main command's port when
// Command.WaitTimeout is 0.
const DefaultWaitTimeout = 60 * time.Second

// ErrClosed is Client.Err after Close.
var ErrClosed = errors.New("relay: channel closed")

// Command is a process for the relay to run.
type Command struct {
	Args []string // argv; Args[0] is looked up in the relay's PATH
	Env  []string // "KEY=value"; nil: the relay's own environment
	Dir  string   // working directory; "": the relay's

	// Start only: with WaitPort > 0, Start returns once 127.0.0.1:WaitPort
	// accepts, or fails after WaitTimeout (0: DefaultWaitTimeout).
	WaitPort    int
	WaitTimeout time.Duration

	Stdin          io.Reader // exec only; nil: empty. Read until EOF or the process ends.
	Stdout, Stderr io.Writer // nil: discarded. Written from one goroutine per process.
}

// Exit is how a process ended.
type Exit struct {
	Code   int    // exit status; -1 when a signal killed it
	Signal string // the signal that killed it, "SIGKILL" etc.; "" otherwise
}

// Process is a process the relay runs: the main command or an exec.
type Process struct {
	id   string
	c    *Client
	done chan struct{}
	exit Exit
	err  error
}

// ID is the process's id on the channel ("main" for the main command).
func (p *Process) ID() string { return p.id }

// Done is closed when the process has ended and all its output is written
// to Command.Stdout/Stderr, or the channel has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit reports, after Done, how the process ended. err is non-nil when it
// never started (the relay's reason) or the channel ended first.
func (p *Process) Exit() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

// Wait is Exit bounded by ctx (ctx.Err() when ctx ends first; the process
// runs on).
func (p *Process) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-p.done:
		return p.exit, p.err
	case <-ctx.Done():
		return Exit{Code: -1}, ctx.Err()
	}
}

// Signal asks the relay to signal the process (on Unix its process group):
// "SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"
// (the "SIG" may be left off). On Windows every signal kills.
func (p *Process) Signal(sig string) error { return errors.New("relay: not implemented") }

// Client is the host's end of a relay channel. Its methods are safe for
// concurrent use.
type Client struct {
	pid  int
	done chan struct{}
}

// Open reads the relay's hello from r and checks its protocol version; w
// carries frames to the relay. An unknown version is refused with an error
// naming both versions, and r and w are closed (those that are io.Closers).
// Close closes them too; the relay then kills everything it started.
func Open(r io.Reader, w io.Writer) (*Client, error) { return nil, errors.New("relay: not implemented") }

// PID is the relay's process id, from its hello (inside the sandbox).
func (c *Client) PID() int { return c.pid }

// Start runs the sandbox's main command, once per channel, and returns when
// the relay reports it ready: started, and with cmd.WaitPort > 0 accepting
// on that loopback port. It fails when the command cannot start, exits
// first, or the wait times out (the relay then kills it); when ctx ends
// first the command is killed. The Process reports the command's end.
func (c *Client) Start(ctx context.Context, cmd Command) (*Process, error) {
	return nil, errors.New("relay: not implemented")
}

// Main is the main command, nil before Start.
func (c *Client) Main() *Process { return nil }

// StartExec runs another process in the sandbox, feeding it cmd.Stdin and
// writing its output to cmd.Stdout/Stderr. ctx bounds only the start.
func (c *Client) StartExec(ctx context.Context, cmd Command) (*Process, error) {
	return nil, errors.New("relay: not implemented")
}

// Exec runs a process to its end: code and signal as in Exit. When ctx
// ends first the process is killed and Exec returns ctx.Err().
func (c *Client) Exec(ctx context.Context, cmd Command) (code int, signal string, err error) {
	return -1, "", errors.New("relay: not implemented")
}

// DialPort opens a TCP connection to 127.0.0.1:port inside the sandbox.
// The net.Conn supports deadlines; Close closes the connection inside too.
// There is no half-close.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return nil, errors.New("relay: not implemented")
}

// Done is closed when the channel has ended: Close, the relay's EOF, a
// read or write error, or a protocol error.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the channel ended (ErrClosed after Close, a *ProtocolError,
// io.EOF when the relay ended it); nil while it runs.
func (c *Client) Err() error { return nil }

// Faults are the problems seen that did not end the channel: frames
// refused (a wrong nonce, an unknown id) and the relay's error frames.
// At most the first 64 are kept.
func (c *Client) Faults() []error { return nil }

// Close ends the channel: closes r and w (if io.Closers), ends every
// process's wait and connection. The relay, seeing EOF, kills what it ran.
func (c *Client) Close() error { return nil }
