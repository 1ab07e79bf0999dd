package mxc

// A process_container sandbox that a control plane keeps
// (provider.LifetimeManaged): one one-shot wxc-exec per sandbox, launched
// at Start, whose workload is the relay (`corral __relay`, docs/relay.md),
// driven over wxc-exec's stdin and stdout. An Exec is a relay exec (many
// per sandbox), DialServed a relay connection (a fresh nonce each), and
// readiness the relay's hello.
//
// The channel cannot outlive the process that holds its other end, and
// MXC has no attach: such a sandbox ends with its control plane. A record
// (record.go: backend process_container, owner, and once it runs
// wxc-exec's pid and start time) is written before wxc-exec starts, so
// that a later process can tell what may be left: Recover answers
// CodeNotFound, and Destroy kills the recorded wxc-exec only while that
// pid still has the recorded start time, then removes the record.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/procid"
	"github.com/corral-sandbox/corral/internal/relay"
	"github.com/corral-sandbox/corral/provider"
)

var (
	_ provider.Persistent = (*container)(nil)
	_ provider.PortDialer = (*container)(nil)
)

// relayArg is the relay mode of the corral binary (cmd/corral/relay.go).
const relayArg = "__relay"

// helloTimeout bounds Start's wait for the relay's hello.
const helloTimeout = 60 * time.Second

// stopGrace is how long Stop waits for wxc-exec to exit once the channel
// is closed (the relay then kills what it ran and exits) before killing
// wxc-exec.
const stopGrace = 10 * time.Second

type container struct {
	*oneShot
	st    store
	relay string // the relay binary

	cmu    sync.Mutex
	client *relay.Client
	wxc    *exec.Cmd
	exited chan struct{} // closed when wxc-exec is reaped
	diag   *lockedTail   // wxc-exec's stderr (the relay's diagnostics), unredacted
	procs  map[*relay.Process]bool
	ended  bool // Stop ran
}

// relayBinary is the configured relay, else this executable.
func (p *Provider) relayBinary() (string, error) {
	if p.cfg.Relay != "" {
		return filepath.Abs(p.cfg.Relay)
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(self)
}

// provisionContainer makes sb a sandbox of the control plane opts.Owner:
// the relay's directory granted read-only, and the record written.
func (p *Provider) provisionContainer(ctx context.Context, sb *oneShot, opts provider.ProvisionOptions) (*container, error) {
	bin, err := p.relayBinary()
	if err != nil {
		return nil, provider.Wrap(provider.CodeProvisionFailed, "the relay binary (corral itself)", err)
	}
	// process_container is default deny: the relay must be readable to run.
	if sb.req.Filesystem == nil {
		sb.req.Filesystem = &Filesystem{}
	}
	sb.req.Filesystem.ReadonlyPaths = append(sb.req.Filesystem.ReadonlyPaths, filepath.Dir(bin))
	st := p.store()
	lk, err := st.lock(ctx, sb.id)
	if err != nil {
		return nil, &provider.Error{Code: provider.CodeProvisionFailed, Msg: "state directory", Err: err}
	}
	defer lk.unlock()
	if old, err := st.read(sb.id); err == nil {
		if old.WxcPID > 0 {
			if start, ok := procid.Start(old.WxcPID); ok && start == old.WxcStart {
				return nil, provider.Errorf(provider.CodeStale, "mxc: sandbox %s still runs (wxc-exec %d): destroy it first", sb.id, old.WxcPID)
			}
		}
		if old.Backend != BackendProcessContainer && standsForSession(old.PhaseState) {
			return nil, provider.Errorf(provider.CodeStale, "mxc: sandbox %s already has a record in state %s (%s): destroy it first", sb.id, old.PhaseState, st.path(sb.id))
		}
	} else if provider.CodeOf(err) != provider.CodeNotFound {
		return nil, err
	}
	rec := &Record{LocalID: sb.id, Backend: BackendProcessContainer, PhaseState: StateProvisioned, Owner: opts.Owner}
	if sb.plan.Policy != nil {
		rec.PolicyHash = sb.plan.Policy.Hash
	}
	if err := st.write(rec); err != nil {
		return nil, &provider.Error{Code: provider.CodeProvisionFailed, Msg: "writing the sandbox record", Err: err}
	}
	return &container{oneShot: sb, st: st, relay: bin, procs: map[*relay.Process]bool{}}, nil
}

// relayRequest is the document of the relay's run: the plan's, with no
// process.timeout (the policy's timeout bounds each exec, not the
// sandbox's life).
func (c *container) relayRequest() (*Request, provider.ExecSpec, error) {
	spec := provider.ExecSpec{Args: []string{c.relay, relayArg}}
	req, err := c.execRequest(c.req, spec)
	if err != nil {
		return nil, spec, err
	}
	req.Process.Timeout = nil
	return req, spec, nil
}

// Start launches wxc-exec with the relay as its workload and returns once
// the relay said hello (its protocol version checked). The record gets
// wxc-exec's pid and start time first thing after it started. A failure
// leaves nothing running.
func (c *container) Start(ctx context.Context) error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.client != nil {
		return nil
	}
	if c.ended {
		return provider.Errorf(provider.CodeStale, "sandbox %s was stopped: its relay cannot be started again", c.id)
	}
	req, spec, err := c.relayRequest()
	if err != nil {
		return err
	}
	b64, err := configArg(req)
	if err != nil {
		return provider.Wrap(provider.CodeInternal, "encoding the request", err)
	}
	if _, err := c.dryRun(ctx, b64, spec); err != nil {
		return provider.Wrap(provider.CodeStartFailed, "", err)
	}
	args, cleanup, err := configFile(execArgs(nil, b64, spec))
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "the request file", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		cleanup()
		return provider.Wrap(provider.CodeStartFailed, "", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cleanup()
		inR.Close()
		inW.Close()
		return provider.Wrap(provider.CodeStartFailed, "", err)
	}
	// No parent-death signal: when this process dies, the end of the
	// channel (EOF on the relay's stdin) is what ends the relay, which
	// kills what it ran first; a killed relay would leave that running.
	cmd := exec.Command(c.bin, args...)
	cmd.WaitDelay = 5 * time.Second // the relay holds wxc-exec's stderr too: a stuck one must not hang Stop
	c.diag = &lockedTail{}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, c.diag
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		cleanup()
		inW.Close()
		outR.Close()
		return provider.Wrap(provider.CodeStartFailed, "running wxc-exec", err)
	}
	c.wxc, c.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		cleanup()
		outR.Close() // the relay's writes ended with it: no read is left pending
		close(c.exited)
	}()
	fail := func(err error) error {
		inW.Close()
		_ = cmd.Process.Kill()
		<-c.exited
		c.ended = true
		c.setRecord(StateStopped, 0, 0, err.Error())
		return err
	}
	start, ok := procid.Start(cmd.Process.Pid)
	if !ok {
		return fail(provider.Errorf(provider.CodeStartFailed, "wxc-exec %d: its start time is unknown, so a later process could not tell it from a reused pid", cmd.Process.Pid))
	}
	if err := c.setRecord(StateStarted, cmd.Process.Pid, start, ""); err != nil {
		return fail(&provider.Error{Code: provider.CodeStartFailed, Msg: "writing the sandbox record", Err: err})
	}
	type opened struct {
		c   *relay.Client
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		// The client closes only the relay's stdin (its Close is the
		// EOF that ends the relay); the read end is closed once wxc-exec
		// is gone. On Windows closing a pipe handle that a read is
		// pending on blocks until the read returns, and the client
		// closes its reader first: it would wait for a relay that never
		// sees EOF.
		cl, err := relay.Open(struct{ io.Reader }{outR}, inW)
		ch <- opened{cl, err}
	}()
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	select {
	case o := <-ch:
		if o.err != nil {
			select { // the channel ended or was refused: wxc-exec ends with it
			case <-c.exited:
			case <-time.After(5 * time.Second):
			}
			return fail(provider.Errorf(provider.CodeStartFailed, "the relay in sandbox %s: %v: %s", c.id, o.err, c.redact(lastLine(c.diag.String()))))
		}
		// wxc-exec read its request before it ran the relay: the file,
		// which holds the proxy credential and the environment, goes now
		// rather than when wxc-exec exits (this process may not be there
		// to see it: a gateway stopped or killed leaves the sandbox to end
		// on its own).
		cleanup()
		c.client = o.c
		return nil
	case <-hctx.Done():
		err := fail(provider.Wrap(provider.CodeStartFailed, "waiting for the relay's hello", hctx.Err()))
		<-ch
		return err
	}
}

// setRecord moves the record to st, with wxc-exec's identity when pid > 0.
func (c *container) setRecord(st State, pid int, start uint64, lastErr string) error {
	rec, err := c.st.read(c.id)
	if err != nil {
		return err
	}
	rec.PhaseState, rec.LastError = st, lastErr
	if pid > 0 {
		rec.WxcPID, rec.WxcStart = pid, start
	}
	return c.st.write(rec)
}

// live is the channel while it runs, else an error saying the sandbox ended.
func (c *container) live() (*relay.Client, error) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.client == nil {
		return nil, provider.Errorf(provider.CodeStale, "sandbox %s is not started", c.id)
	}
	select {
	case <-c.client.Done():
		return nil, provider.Errorf(provider.CodeExecFailed, "sandbox %s has ended: its relay's channel closed (%v): %s", c.id, c.client.Err(), c.redact(lastLine(c.diag.String())))
	default:
	}
	return c.client, nil
}

// Running reports whether wxc-exec runs and the relay's channel is open.
func (c *container) Running(ctx context.Context) bool {
	cl, err := c.live()
	if err != nil {
		return false
	}
	select {
	case <-c.exited:
		return false
	case <-cl.Done():
		return false
	default:
		return true
	}
}

// State is what Recover takes: the local id. Recover answers CodeNotFound
// for it once its control plane is gone.
func (c *container) State() []byte { return SessionState(c.id) }

// Exec runs spec as a relay exec: stdin fed from spec.Stdin, output to
// spec.Stdout and spec.Stderr (redacted), with the relay's environment
// (the policy's). The policy's process.timeout, if any, bounds it
// (exit 124, TimedOut); ending ctx kills it (provider.CancelledStatus).
// Started is called with 0: the relay does not report the exec's pid.
func (c *container) Exec(ctx context.Context, spec provider.ExecSpec) (provider.ExitStatus, error) {
	if _, err := c.execRequest(c.req, spec); err != nil {
		return provider.ExitStatus{}, err
	}
	cl, err := c.live()
	if err != nil {
		return provider.ExitStatus{}, err
	}
	var timeout <-chan time.Time
	if c.req.Process != nil && c.req.Process.Timeout != nil {
		t := time.NewTimer(time.Duration(*c.req.Process.Timeout) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	stderr := newRedactWriter(fileWriterOrDiscard(spec.Stderr), c.secrets)
	cmd := relay.Command{Args: spec.Args, Dir: spec.Dir, Stdin: fileReader(spec.Stdin), Stdout: fileWriter(spec.Stdout), Stderr: stderr}
	t0 := time.Now()
	p, err := cl.StartExec(ctx, cmd)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "relay exec", err)
	}
	c.track(p, true)
	defer c.track(p, false)
	if spec.Started != nil {
		spec.Started(0) // the relay does not say the exec's pid
	}
	var timedOut bool
	select {
	case <-p.Done():
	case <-ctx.Done():
		_ = p.Signal("SIGKILL")
		<-p.Done()
		_ = stderr.Flush()
		return provider.CancelledStatus(time.Since(t0), ctx.Err())
	case <-timeout:
		timedOut = true
		_ = p.Signal("SIGKILL")
		<-p.Done()
	}
	e, err := p.Exit()
	_ = stderr.Flush()
	st := provider.ExitStatus{Duration: time.Since(t0), Code: e.Code, Signal: e.Signal}
	if timedOut {
		st = provider.TimedOutStatus(st.Duration)
		st.Reason = "the policy timeout expired: the exec was killed"
		return st, nil
	}
	if err != nil {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeExecFailed, "sandbox %s: %s", c.id, c.redact(err.Error()))
	}
	if e.Signal != "" {
		st.Code = 128 + signalNumber(e.Signal)
	}
	return st, nil
}

func (c *container) track(p *relay.Process, on bool) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if on {
		c.procs[p] = true
	} else {
		delete(c.procs, p)
	}
}

// Signal sends sig to every running exec (through the relay; on Windows
// every signal kills).
func (c *container) Signal(sig os.Signal) error {
	name := signalName(sig)
	c.cmu.Lock()
	procs := make([]*relay.Process, 0, len(c.procs))
	for p := range c.procs {
		procs = append(procs, p)
	}
	c.cmu.Unlock()
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.Signal(name))
	}
	return errors.Join(errs...)
}

// DialServed connects to port on the loopback the sandbox sees, through
// the relay (a fresh nonce per connection). On process_container that is
// the host's loopback as seen from inside: its reach is broader than the
// sandbox's own processes (CONTRACT.md).
func (c *container) DialServed(port int, timeout time.Duration) (net.Conn, error) {
	cl, err := c.live()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return cl.DialPort(ctx, port)
}

// Stop ends the channel, on which the relay kills what it ran and exits,
// and waits for wxc-exec to exit (killed after stopGrace); idempotent. A
// stopped sandbox cannot be started again (a new Provision can).
func (c *container) Stop(ctx context.Context) error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.ended || c.wxc == nil {
		c.ended = true
		return nil
	}
	c.ended = true
	if c.client != nil {
		_ = c.client.Close()
	}
	select {
	case <-c.exited:
	case <-time.After(stopGrace):
		_ = c.wxc.Process.Kill()
		<-c.exited
	}
	return c.setRecord(StateStopped, 0, 0, "")
}

// Deprovision stops the sandbox, closes its egress listener, removes its
// temp folder and its record; idempotent.
func (c *container) Deprovision(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil && provider.CodeOf(err) != provider.CodeNotFound {
		return err
	}
	if err := c.oneShot.Deprovision(ctx); err != nil {
		return err
	}
	lk, err := c.st.lock(ctx, c.id)
	if err != nil {
		return err
	}
	defer lk.unlock()
	if err := c.st.remove(c.id); err != nil {
		return provider.Wrap(provider.CodeInternal, "removing the record of "+c.id, err)
	}
	return nil
}

// destroyContainer removes what a process_container sandbox's record says
// may be left: the recorded wxc-exec is killed only while its pid has the
// recorded start time (a reused pid is never touched), then the record is
// removed. A sandbox this process still runs is stopped by its own value,
// not here: its wxc-exec is this process's child, killed the same way.
func (p *Provider) destroyContainer(ctx context.Context, st store, rec *Record) error {
	lk, err := st.lock(ctx, rec.LocalID)
	if err != nil {
		return err
	}
	defer lk.unlock()
	cur, err := st.read(rec.LocalID)
	if provider.CodeOf(err) == provider.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.WxcPID > 0 {
		if _, err := procid.KillStarted(cur.WxcPID, cur.WxcStart); err != nil {
			return provider.Wrap(provider.CodeStopFailed, fmt.Sprintf("killing wxc-exec %d of sandbox %s", cur.WxcPID, cur.LocalID), err)
		}
	}
	if err := st.remove(cur.LocalID); err != nil {
		return provider.Wrap(provider.CodeInternal, "removing the record of "+cur.LocalID, err)
	}
	return nil
}

// lockedTail keeps the last 8 KiB of wxc-exec's stderr, safe for the copy
// goroutine and readers.
type lockedTail struct {
	mu sync.Mutex
	t  tailBuffer
}

func (l *lockedTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Write(p)
	return len(p), nil
}

func (l *lockedTail) String() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.String()
}

func fileWriterOrDiscard(f *os.File) io.Writer {
	if f == nil {
		return io.Discard
	}
	return f
}

// linuxSignals are the numbers of the signals a relay on Linux names
// (signal(7), x86 and arm): only the stand-in's relay, which runs on the
// host, reports a signal at all (a Windows process ends with a code). An
// exit by signal N is reported as 128+N, as a shell does.
var linuxSignals = map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7,
	"SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15,
	"SIGSTKFLT": 16, "SIGXCPU": 24, "SIGXFSZ": 25, "SIGVTALRM": 26, "SIGPROF": 27, "SIGIO": 29, "SIGPWR": 30, "SIGSYS": 31}

// signalNumber is name's number; a name not in linuxSignals gives 127
// (exit 255: never 128, which would read as a clean exit code).
func signalNumber(name string) int {
	if n, ok := linuxSignals[name]; ok {
		return n
	}
	return 127
}

// signalName is sig's name for the relay; anything else is a kill.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return "SIGKILL"
}
