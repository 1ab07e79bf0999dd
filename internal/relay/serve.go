package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxWaitTimeout caps a start's wait for its port.
const maxWaitTimeout = time.Hour

// Serve is the relay: it says hello on out, then runs what the host asks on
// in until in reaches EOF (nil), ctx ends (ctx.Err()), or the channel
// breaks (the error: a write failure, a *ProtocolError). Before returning
// it kills every process it started (and waits for each to be reaped) and
// closes every connection. Processes get pipes for stdio, never in or out.
func Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	s := &server{w: &writer{w: out}, procs: map[string]*rproc{}, conns: map[string]*rconn{}, nonces: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.ctx = ctx
	defer s.shutdown()
	if err := s.w.send(&frame{T: tHello, V: Version, PID: os.Getpid()}); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		br := newReader(in)
		for {
			f, err := readFrame(br)
			if err == nil {
				err = s.handle(f)
			}
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		var pe *ProtocolError
		if errors.As(err, &pe) {
			_ = s.w.send(&frame{T: tError, Error: pe.Error()})
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

type server struct {
	ctx     context.Context
	w       *writer
	mu      sync.Mutex
	procs   map[string]*rproc
	conns   map[string]*rconn // opening ones too (conn nil)
	nonces  map[string]bool   // every nonce seen on this channel
	started bool              // start was asked
	dead    bool              // shutting down: nothing new starts
}

// rproc is a process the relay started.
type rproc struct {
	id     string
	cmd    *exec.Cmd
	in     *inbox  // the host's in frames; nil for main
	out    *credit // the out window
	tree   tree    // what a kill reaches: its process group, or its job on Windows
	reaped chan struct{}
}

// rconn is a connection to a loopback port.
type rconn struct {
	id   string
	conn net.Conn
	in   *inbox
	out  *credit
	closing
}

var nonceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{32}$`) })

// handle acts on one frame from the host; an error ends the channel.
func (s *server) handle(f *frame) error {
	switch f.T {
	case tStart:
		s.mu.Lock()
		again := s.started
		s.started = true
		s.mu.Unlock()
		if again {
			return s.report(MainID, "the main command was already started")
		}
		s.start(MainID, f, false)
	case tExec:
		if msg := s.checkID(f.ID); msg != "" {
			return s.report(f.ID, "exec: "+msg)
		}
		s.start(f.ID, f, true)
	case tIn, tEOF:
		if p := s.proc(f.ID); p != nil && p.in != nil {
			if f.T == tEOF {
				p.in.end()
			} else if err := p.in.put(0, f.Data); err != nil {
				return err
			}
		}
	case tSignal:
		if p := s.proc(f.ID); p != nil {
			if err := signalTree(p.cmd.Process, p.tree, f.Sig); err != nil {
				return s.report(f.ID, "signal: "+err.Error())
			}
		}
	case tOpen:
		s.open(f)
	case tData:
		if c := s.conn(f.ID); c != nil {
			return c.in.put(0, f.Data)
		}
	case tClose:
		if c := s.conn(f.ID); c != nil {
			s.mu.Lock()
			c.got = true
			s.mu.Unlock()
			c.in.end() // its writer drains, then closes the connection
			s.sendClose(c)
		}
	case tAck:
		if p := s.proc(f.ID); p != nil {
			return p.out.give(f.N)
		}
		if c := s.conn(f.ID); c != nil {
			return c.out.give(f.N)
		}
	default:
		return s.report(f.ID, fmt.Sprintf("unknown frame type %q ignored", f.T))
	}
	return nil
}

// report sends an error frame; only a failed write ends the channel.
func (s *server) report(id, msg string) error {
	return s.w.send(&frame{T: tError, ID: id, Error: msg})
}

func (s *server) proc(id string) *rproc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// conn is the open (dialed) connection id, nil if none.
func (s *server) conn(id string) *rconn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[id]; c != nil && c.conn != nil {
		return c
	}
	return nil
}

// checkID says what is wrong with a new exec's or open's id, "" if nothing.
func (s *server) checkID(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id == "" || len(id) > maxID:
		return fmt.Sprintf("an id of %d bytes (1 to %d)", len(id), maxID)
	case id == MainID:
		return "the id main is the main command's"
	case s.procs[id] != nil || s.conns[id] != nil:
		return fmt.Sprintf("id %q is in use", id)
	}
	return ""
}

// start starts a process and its pumps; its end is an exit frame.
func (s *server) start(id string, f *frame, stdin bool) {
	var files []*os.File // every pipe end made here, closed on failure
	fail := func(err error) {
		for _, f := range files {
			f.Close()
		}
		_ = s.w.send(&frame{T: tExit, ID: id, Code: -1, Error: err.Error()})
	}
	if len(f.Args) == 0 {
		fail(errors.New("no command"))
		return
	}
	cmd := exec.Command(f.Args[0], f.Args[1:]...)
	if len(f.Env) > 0 {
		cmd.Env = f.Env
	}
	cmd.Dir = f.Dir
	// pipes[i] is {parent's end, child's end} of stdout, stderr[, stdin].
	var pipes [][2]*os.File
	for i := range 3 {
		if i == 2 && !stdin {
			break
		}
		r, w, err := os.Pipe()
		if err != nil {
			fail(err)
			return
		}
		files = append(files, r, w)
		if i == 2 {
			r, w = w, r
		}
		pipes = append(pipes, [2]*os.File{r, w})
	}
	cmd.Stdout, cmd.Stderr = pipes[0][1], pipes[1][1]
	p := &rproc{id: id, cmd: cmd, out: newCredit(), reaped: make(chan struct{})}
	if stdin {
		cmd.Stdin = pipes[2][1]
		p.in = newInbox()
	}
	s.mu.Lock()
	err := errors.New("the relay is shutting down")
	if !s.dead {
		if p.tree, err = startTree(cmd); err == nil {
			s.procs[id] = p
		}
	}
	s.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	for _, pp := range pipes {
		pp[1].Close() // the child's now
	}
	go func() { _ = cmd.Wait(); p.tree.reaped(); close(p.reaped) }()
	if id == MainID {
		if f.WaitPort > 0 {
			go s.awaitReady(p, f)
		} else {
			_ = s.w.send(&frame{T: tReady, ID: MainID}) // before any exit frame
		}
	}
	if stdin {
		go s.feed(p, pipes[2][0])
	}
	var pumps sync.WaitGroup
	for i, r := range []*os.File{pipes[0][0], pipes[1][0]} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			defer r.Close()
			s.pump(id, i+1, r, p.out)
		}()
	}
	go func() {
		pumps.Wait()
		<-p.reaped
		s.mu.Lock()
		delete(s.procs, id)
		s.mu.Unlock()
		p.out.close()
		if p.in != nil {
			p.in.close()
		}
		ps := cmd.ProcessState
		_ = s.w.send(&frame{T: tExit, ID: id, Code: ps.ExitCode(), Signal: exitSignal(ps)})
	}()
}

// pump sends what r yields as out frames (fd 1, 2) or data frames (fd 0).
func (s *server) pump(id string, fd int, r io.Reader, cr *credit) {
	t := tOut
	if fd == 0 {
		t = tData
	}
	pumpFrames(s.w.send, id, t, fd, r, cr)
}

// drain writes what the host sent for id to w, acking each chunk.
func (s *server) drain(id string, in *inbox, w io.Writer) {
	drainInbox(s.w.send, id, in, func(c chunk) error { _, err := w.Write(c.data); return err })
}

// feed is an exec's stdin.
func (s *server) feed(p *rproc, w *os.File) {
	defer w.Close()
	s.drain(p.id, p.in, w)
}

// awaitReady sends ready once the main command's wait port accepts; a
// wait that times out kills the command.
func (s *server) awaitReady(p *rproc, f *frame) {
	timeout := time.Duration(f.WaitTimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	if s.waitPort(p, f.WaitPort, min(timeout, maxWaitTimeout)) {
		_ = s.w.send(&frame{T: tReady, ID: MainID})
	}
}

// waitPort polls 127.0.0.1:port until it accepts (true), or the command
// ends, the relay ends, or timeout passes (false; the command is killed).
func (s *server) waitPort(p *rproc, port int, timeout time.Duration) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(s.ctx, "tcp", addr); err == nil {
			c.Close()
			return true
		}
		if time.Now().After(deadline) {
			_ = s.report(MainID, fmt.Sprintf("start: nothing accepted on 127.0.0.1:%d within %v; the main command is killed", port, timeout))
			killTree(p.cmd.Process, p.tree)
			return false
		}
		select {
		case <-p.reaped:
			return false
		case <-s.ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// open dials a loopback port for the host.
func (s *server) open(f *frame) {
	refuse := func(msg string) { _ = s.w.send(&frame{T: tClosed, ID: f.ID, Error: "open: " + msg}) }
	if msg := s.checkID(f.ID); msg != "" {
		_ = s.report(f.ID, "open: "+msg) // a closed frame would end the stream using the id
		return
	}
	if !nonceRE().MatchString(f.Nonce) {
		refuse("the nonce is not 32 lower-case hex digits")
		return
	}
	if f.Port < 1 || f.Port > 65535 {
		refuse(fmt.Sprintf("port %d is out of range", f.Port))
		return
	}
	s.mu.Lock()
	reused := s.nonces[f.Nonce]
	s.nonces[f.Nonce] = true
	c := &rconn{id: f.ID, in: newInbox(), out: newCredit()}
	if !reused {
		s.conns[f.ID] = c // reserves the id while dialing
	}
	s.mu.Unlock()
	if reused {
		refuse("the nonce was already used on this channel")
		return
	}
	go func() {
		d := net.Dialer{Timeout: 10 * time.Second}
		conn, err := d.DialContext(s.ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port)))
		s.mu.Lock()
		if err == nil && s.dead {
			conn.Close()
			err = errors.New("the relay is shutting down")
		}
		if err != nil {
			delete(s.conns, f.ID)
		} else {
			c.conn = conn
		}
		s.mu.Unlock()
		if err != nil {
			refuse(err.Error())
			return
		}
		if s.w.send(&frame{T: tOpened, ID: f.ID, Nonce: f.Nonce}) != nil {
			return
		}
		go func() {
			s.drain(c.id, c.in, conn)
			conn.Close()
		}()
		s.pump(c.id, 0, conn, c.out)
		conn.Close()
		s.sendClose(c)
	}()
}

// sendClose sends c's close frame once, and forgets c once both are done.
func (s *server) sendClose(c *rconn) {
	sendClose(&s.mu, &c.closing, c.id, s.w.send, func() {
		if s.conns[c.id] == c {
			delete(s.conns, c.id)
			c.out.close()
		}
	})
}

// shutdown kills every process, waits for each to be reaped, and closes
// every connection; frames not yet written are dropped.
func (s *server) shutdown() {
	s.mu.Lock()
	s.dead = true
	procs := make([]*rproc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	conns := make([]*rconn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.w.stop()
	for _, c := range conns {
		c.in.close()
		c.out.close()
		if c.conn != nil {
			c.conn.Close()
		}
	}
	for _, p := range procs {
		killTree(p.cmd.Process, p.tree)
		p.out.close()
		if p.in != nil {
			p.in.close()
		}
	}
	for _, p := range procs {
		<-p.reaped
	}
	killOrphans()
}

// sigName is a signal's name as "SIGTERM", from "TERM", "sigterm", ....
func sigName(s string) string {
	s = strings.ToUpper(s)
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	return s
}
