package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
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

	Stdin          io.Reader // exec only; nil: empty. Read until EOF; a Read under way when the process ends is left to return.
	Stdout, Stderr io.Writer // nil: discarded. Written from one goroutine per process.
}

// Exit is how a process ended.
type Exit struct {
	Code   int    // exit status; -1 when a signal killed it
	Signal string // the signal that killed it, "SIGKILL" etc.; "" otherwise
}

// Process is a process the relay runs: the main command or an exec.
type Process struct {
	id     string
	c      *Client
	out    *inbox  // its output, drained to stdout/stderr
	in     *credit // its stdin window; nil for main
	stdout io.Writer
	stderr io.Writer
	done   chan struct{}
	finish sync.Once     // closes done
	ready  chan struct{} // main: the relay said ready
	failed chan error    // main: the relay's error before ready (buffered)
	exited bool          // exit frame seen or channel ended; under c.mu
	exit   Exit          // set before out ends
	err    error         // likewise
}

// ID is the process's id on the channel ("main" for the main command).
func (p *Process) ID() string { return p.id }

// Done is closed when the process has ended and all its output is written
// to Command.Stdout/Stderr, or the channel has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit waits for Done and reports how the process ended. err is non-nil
// when it never started (the relay's reason) or the channel ended first
// (Exit is then {-1, ""}).
func (p *Process) Exit() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

// Wait is Exit bounded by ctx: ctx.Err() when ctx ends first (the process
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
// (the "SIG" may be left off). On Windows every signal kills. An unknown
// name comes back as a fault (Client.Faults).
func (p *Process) Signal(sig string) error {
	select {
	case <-p.done:
		return fmt.Errorf("relay: process %s has ended", p.id)
	default:
	}
	return p.c.send(&frame{T: tSignal, ID: p.id, Sig: sig})
}

// Client is the host's end of a relay channel. Its methods are safe for
// concurrent use.
type Client struct {
	pid    int
	w      *writer
	closer []io.Closer
	done   chan struct{}
	finish sync.Once // closes done

	mu     sync.Mutex
	err    error
	procs  map[string]*Process
	conns  map[string]*hconn
	main   *Process
	next   uint64
	faults []error
}

// maxFaults bounds Client.Faults.
const maxFaults = 64

// Open reads the relay's hello from r and checks its protocol version; w
// carries frames to the relay. It blocks until the hello (bound it by
// ending the relay). An unknown version is refused with an error naming
// both versions, and r and w are closed (those that are io.Closers).
// Close closes them too; the relay then kills everything it started.
func Open(r io.Reader, w io.Writer) (*Client, error) {
	c := &Client{w: &writer{w: w}, done: make(chan struct{}), procs: map[string]*Process{}, conns: map[string]*hconn{}}
	// w first: the relay's EOF must not wait on closing r, which on
	// Windows blocks while a read of the pipe is pending.
	for _, x := range []any{w, r} {
		if cl, ok := x.(io.Closer); ok {
			c.closer = append(c.closer, cl)
		}
	}
	br := newReader(r)
	f, err := readFrame(br)
	switch {
	case err == io.EOF:
		err = errors.New("relay: the channel ended before the relay's hello")
	case err != nil:
	case f.T != tHello:
		err = protoErr("the relay's first frame is %q, not hello", f.T)
	case f.V != Version:
		err = fmt.Errorf("relay: the relay speaks protocol version %d; this host speaks version %d", f.V, Version)
	}
	if err != nil {
		c.fail(err)
		return nil, err
	}
	c.pid = f.PID
	go c.read(br)
	return c, nil
}

// PID is the relay's process id, from its hello (inside the sandbox).
func (c *Client) PID() int { return c.pid }

// Done is closed when the channel has ended: Close, the relay's EOF, a
// read or write error, or a protocol error.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the channel ended: ErrClosed after Close, a *ProtocolError,
// an error wrapping io.EOF when the relay ended it; nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Faults are the problems seen that did not end the channel: frames
// refused (a wrong nonce, an unknown id) and the relay's error frames. At
// most the first 64 are kept.
func (c *Client) Faults() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.faults...)
}

// Close ends the channel: closes r and w (those that are io.Closers), ends
// every process's wait and every connection. The relay, seeing EOF, kills
// what it ran. It returns nil.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	return nil
}

func (c *Client) fault(format string, a ...any) {
	c.mu.Lock()
	if len(c.faults) < maxFaults {
		c.faults = append(c.faults, fmt.Errorf("relay: "+format, a...))
	}
	c.mu.Unlock()
}

// send writes a frame; a failed write ends the channel.
func (c *Client) send(f *frame) error {
	select {
	case <-c.done:
		return c.Err()
	default:
	}
	err := c.w.send(f)
	if err != nil {
		c.fail(err)
	}
	return err
}

// fail ends the channel once with err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	procs, conns := c.procs, c.conns
	c.procs, c.conns = map[string]*Process{}, map[string]*hconn{}
	for _, p := range procs {
		if !p.exited {
			p.exited, p.exit, p.err = true, Exit{Code: -1}, fmt.Errorf("relay: the channel ended before process %s did: %w", p.id, err)
		}
	}
	c.mu.Unlock()
	c.w.stop()
	for _, cl := range c.closer {
		cl.Close()
	}
	for _, p := range procs {
		p.out.close()
		if p.in != nil {
			p.in.close()
		}
		p.end()
	}
	for _, h := range conns {
		h.shut(err)
	}
}

// read dispatches the relay's frames until the channel ends. It never
// blocks on a consumer or on writing the channel.
func (c *Client) read(br *bufio.Reader) {
	for {
		f, err := readFrame(br)
		if err == nil {
			err = c.dispatch(f)
		}
		if err != nil {
			if err == io.EOF {
				err = fmt.Errorf("relay: the relay ended the channel: %w", err)
			}
			c.fail(err)
			return
		}
	}
}

// lookup is the process and the connection of id, nil when none.
func (c *Client) lookup(id string) (*Process, *hconn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[id], c.conns[id]
}

func (c *Client) dispatch(f *frame) error {
	p, h := c.lookup(f.ID)
	switch f.T {
	case tOut, tExit, tReady:
		if p == nil {
			c.fault("a %s frame for unknown process %q dropped", f.T, f.ID)
			return nil
		}
		return c.onProc(p, f)
	case tAck:
		switch {
		case p != nil && p.in != nil:
			return p.in.give(f.N)
		case h != nil:
			return h.out.give(f.N)
		}
		return nil // an ack after the end is harmless
	case tOpened, tClosed, tData, tClose:
		if h == nil {
			c.fault("a %s frame for unknown connection %q dropped", f.T, f.ID)
			return nil
		}
		return c.onConn(h, f)
	case tError:
		if p != nil && p.failed != nil {
			select {
			case p.failed <- fmt.Errorf("relay: %s", f.Error):
			default:
			}
		}
		c.fault("the relay reports (id %q): %s", f.ID, f.Error)
		return nil
	case tHello:
		return protoErr("a second hello")
	}
	return protoErr("an unknown frame type %q", f.T)
}

func (c *Client) onProc(p *Process, f *frame) error {
	switch f.T {
	case tReady:
		if p.ready == nil {
			c.fault("a ready frame for process %q, not the main command", f.ID)
			return nil
		}
		select {
		case <-p.ready:
		default:
			close(p.ready)
		}
	case tOut:
		if f.FD != 1 && f.FD != 2 {
			return protoErr("an out frame for fd %d", f.FD)
		}
		return p.out.put(f.FD, f.Data)
	case tExit:
		c.mu.Lock()
		delete(c.procs, p.id)
		p.exited, p.exit = true, Exit{Code: f.Code, Signal: f.Signal}
		if f.Error != "" {
			p.err = fmt.Errorf("relay: process %s: %s", p.id, f.Error)
		}
		c.mu.Unlock()
		if p.in != nil {
			p.in.close()
		}
		p.out.end()
	}
	return nil
}

// newProcess registers a process before its start or exec frame is sent.
func (c *Client) newProcess(id string, cmd Command) (*Process, error) {
	p := &Process{id: id, c: c, out: newInbox(), stdout: cmd.Stdout, stderr: cmd.Stderr, done: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	if id == MainID {
		if c.main != nil {
			return nil, errors.New("relay: the main command was already started")
		}
		p.ready, p.failed = make(chan struct{}), make(chan error, 1)
		c.main = p
	} else {
		p.in = newCredit()
	}
	c.procs[id] = p
	go c.consume(p)
	return p, nil
}

// consume writes a process's output, acking each chunk, then closes done.
// A failing writer only loses output.
func (c *Client) consume(p *Process) {
	defer p.end()
	drainInbox(c.send, p.id, p.out, func(ch chunk) error {
		w := p.stdout
		if ch.fd == 2 {
			w = p.stderr
		}
		if w != nil {
			_, _ = w.Write(ch.data)
		}
		return nil
	})
}

// end closes done, once: the output is written or the channel ended
// (a consumer blocked in a writer does not hold up the end).
func (p *Process) end() { p.finish.Do(func() { close(p.done) }) }

// Start runs the sandbox's main command, once per channel, and returns when
// the relay reports it ready: started, and with cmd.WaitPort > 0 accepting
// on that loopback port. It fails when the command cannot start, exits
// first, or the wait times out (the relay then kills it); when ctx ends
// first the command is killed. The Process, non-nil whenever the start
// frame went out, reports the command's end.
func (c *Client) Start(ctx context.Context, cmd Command) (*Process, error) {
	p, err := c.newProcess(MainID, cmd)
	if err != nil {
		return nil, err
	}
	f := &frame{T: tStart, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, WaitPort: cmd.WaitPort}
	if cmd.WaitTimeout > 0 { // rounded up: 0 would mean the default
		f.WaitTimeoutMS = int64((cmd.WaitTimeout + time.Millisecond - 1) / time.Millisecond)
	}
	if err := c.send(f); err != nil {
		return p, err
	}
	select {
	case <-p.ready:
		return p, nil
	case err := <-p.failed:
		return p, err
	case <-p.done:
		e, err := p.Exit()
		if err != nil {
			return p, err
		}
		return p, fmt.Errorf("relay: the main command ended (code %d%s) before it was ready", e.Code, sigSuffix(e.Signal))
	case <-ctx.Done():
		_ = p.Signal("SIGKILL")
		return p, ctx.Err()
	}
}

func sigSuffix(sig string) string {
	if sig == "" {
		return ""
	}
	return ", " + sig
}

// Main is the main command, nil before Start.
func (c *Client) Main() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.main
}

// StartExec runs another process in the sandbox, feeding it cmd.Stdin and
// writing its output to cmd.Stdout/Stderr; the Process reports its end (a
// failure to start too). ctx bounds only the start.
func (c *Client) StartExec(ctx context.Context, cmd Command) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := c.newProcess(c.newID("e"), cmd)
	if err != nil {
		return nil, err
	}
	if err := c.send(&frame{T: tExec, ID: p.id, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir}); err != nil {
		return nil, err
	}
	if cmd.Stdin == nil {
		_ = c.send(&frame{T: tEOF, ID: p.id})
	} else {
		go c.feed(p, cmd.Stdin)
	}
	return p, nil
}

// feed sends r to p's stdin within its window, then eof.
func (c *Client) feed(p *Process, r io.Reader) {
	if pumpFrames(c.send, p.id, tIn, 0, r, p.in) {
		_ = c.send(&frame{T: tEOF, ID: p.id})
	}
}

// Exec runs a process to its end: code and signal as in Exit. When ctx
// ends first the process is killed and Exec returns ctx.Err().
func (c *Client) Exec(ctx context.Context, cmd Command) (code int, signal string, err error) {
	p, err := c.StartExec(ctx, cmd)
	if err != nil {
		return -1, "", err
	}
	select {
	case <-p.done:
		e, err := p.Exit()
		return e.Code, e.Signal, err
	case <-ctx.Done():
		_ = p.Signal("SIGKILL")
		return -1, "", ctx.Err()
	}
}

func (c *Client) newID(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	return prefix + strconv.FormatUint(c.next, 10)
}
