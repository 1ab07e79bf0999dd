//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/detached"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/session"
)

// SupervisorArg is argv[1] of the supervisor process the launcher starts.
const SupervisorArg = "__service-supervise"

// SupervisorOptions wire the supervisor to the rest of corral.
type SupervisorOptions struct {
	Version string
	// Foreground, for a one-shot session (Run), runs the workload with
	// these stdio files instead of the log, forwards SIGINT, SIGTERM,
	// SIGHUP and SIGQUIT to it (a second one kills it), and makes the exit
	// code the workload's.
	Foreground *Foreground
	// AuditPath replaces DIR/log/audit.jsonl.
	AuditPath string
	// StrictTree, for a one-shot session, moves what the workload planted
	// aside and makes the exit code 116 (provider.CodePlanted), as
	// corral run --strict-tree.
	StrictTree bool
	// Environ is what the credentials' env sources read: the launcher's
	// variables they name (ReadHandoff); nil means this process's
	// environment (a one-shot session's, which is its caller's). The
	// supervisor holds them in memory only.
	Environ []string
}

// Foreground is the stdio of a foreground workload.
type Foreground struct{ Stdin, Stdout, Stderr *os.File }

// Restart backoff: 1 s doubling to 60 s, back to 1 s after a run that
// lasted 5 minutes (systemd's and Kubernetes' CrashLoopBackOff use the
// same shape).
const (
	backoffMin   = time.Second
	backoffMax   = time.Minute
	backoffReset = 5 * time.Minute
	// logMax caps workload.log; at the cap it is renamed workload.log.1
	// (replacing the older one), so the log uses at most twice this.
	logMax = 16 << 20
	// probeEvery spaces readiness probes once the workload is ready.
	probeEvery = 15 * time.Second
	// auditMax caps the session's audit.jsonl as logMax does
	// workload.log.
	auditMax = 64 << 20
)

// launchMsg is what the supervisor tells the launcher on its readiness
// pipe: that the first workload started, or why nothing did.
type launchMsg struct {
	Started bool   `json:"started,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Code    string `json:"code,omitempty"`
	Layer   string `json:"layer,omitempty"`
	Error   string `json:"error,omitempty"`
}

type supervisor struct {
	o       SupervisorOptions
	p       Paths
	rec     *Record
	st      *StartSpec
	plan    *provider.Plan
	runs    int          // sandboxes made so far (runOnce)
	planted int          // paths the workload planted, over all runs (checkPlanted)
	launch  *os.File     // the launcher's pipe, until the first start is told
	hub     *consent.Hub // the consent broker of the run in progress (serveApprovals)
	log     *audit.Log

	writeMu  sync.Mutex
	mu       sync.Mutex
	status   Status
	sess     *session.Session // the current run's
	stopping bool
	stopCh   chan struct{}
	kill     context.CancelFunc // ends the current run at once
	early    syscall.Signal     // foreground: a signal that came before the workload started
}

// Supervise is the session's supervisor: started detached by `service
// start`, outside the sandbox, as the launcher's user. It builds the
// sandbox, serves its egress and published ports, runs the workload and
// restarts it per the restart policy, each time in a fresh sandbox over
// the same home, and writes DIR/status.json. SIGTERM stops the workload
// (SIGTERM, then SIGKILL after the stop grace) and ends it. launch is the
// launcher's pipe (nil when none). It returns the process's exit code.
func Supervise(dir string, launch *os.File, o SupervisorOptions) int {
	s := &supervisor{o: o, p: Paths{dir}, launch: launch, stopCh: make(chan struct{}), hub: consent.NewHub()}
	s.status = Status{Name: baseName(s.p), State: StateStarting, Supervisor: ProcOf(os.Getpid())}
	rec, err := LoadRecord(s.p)
	if err == nil && (rec.Start == nil || rec.Phase != PhaseReady) {
		err = fmt.Errorf("service %s cannot start: phase %s, start spec present: %v", rec.Name, rec.Phase, rec.Start != nil)
	}
	if err == nil {
		err = rec.Start.Validate()
	}
	if err != nil {
		return s.fail(err)
	}
	s.rec, s.st = rec, rec.Start
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	if o.Foreground != nil {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
		go s.forwardSignals(sigs)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		signal.Ignore(syscall.SIGHUP)
		go func() {
			<-sigs
			s.stop()
		}()
	}
	s.write()
	// For systemd's Type=forking (PIDFile=): the supervisor is the unit's
	// main process.
	_ = os.WriteFile(s.p.PIDFile(), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600)
	defer os.Remove(s.p.PIDFile())
	ctx := context.Background()
	if err := s.replan(ctx); err != nil {
		return s.fail(err)
	}
	listeners, err := s.publish()
	if err != nil {
		return s.fail(err)
	}
	if s.plan.Policy.Consent != nil {
		stop, err := s.serveApprovals()
		if err != nil {
			return s.fail(err)
		}
		defer stop()
	}
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	auditPath := s.p.Audit()
	if o.AuditPath != "" {
		auditPath = o.AuditPath
	}
	// The workload decides how many egress decisions it causes: the
	// session's own log is bounded like workload.log (rotated at
	// auditMax, at most twice that on disk); one the caller named
	// (service run --audit) is not rotated. Denials beyond
	// audit.MaxDenied a minute are aggregated (audit.Log).
	opts := audit.LogOptions{Window: time.Minute}
	if o.AuditPath == "" {
		opts.MaxBytes = auditMax
	}
	if s.log, err = audit.OpenLog(auditPath, opts); err != nil {
		return s.fail(err)
	}
	defer func() {
		_ = s.log.Close()
		if st := s.log.Stats(); st.Aggregated > 0 {
			s.logf("egress: %d decisions beyond %d denied or %d allowed a minute were written to the audit log as aggregates", st.Aggregated, audit.MaxDenied, audit.MaxAllowed)
		}
	}()
	return s.loop(ctx)
}

// fail records a failure to start and tells the launcher.
func (s *supervisor) fail(err error) int {
	s.mu.Lock()
	s.status.State, s.status.Error = StateFailed, err.Error()
	s.mu.Unlock()
	s.write()
	m := launchMsg{Error: err.Error(), Code: string(codeOf(err))}
	var pe *provider.Error
	if errors.As(err, &pe) {
		m.Layer, m.Error = pe.Layer, pe.Msg
		if pe.Err != nil {
			m.Error = strings.TrimPrefix(m.Error+": "+pe.Err.Error(), ": ")
		}
	}
	s.tell(m)
	s.logf("%v", err)
	if s.o.Foreground != nil {
		return codeOf(err).ExitCode()
	}
	return 1
}

// forwardSignals passes the first signal to the foreground workload (and
// ends restarts); a second kills it.
func (s *supervisor) forwardSignals(sigs <-chan os.Signal) {
	n := 0
	for sig := range sigs {
		n++
		s.mu.Lock()
		if !s.stopping {
			s.stopping = true
			close(s.stopCh)
		}
		sb, kill := s.sess, s.kill
		if sb == nil && s.early == 0 {
			s.early = sig.(syscall.Signal)
		}
		s.mu.Unlock()
		switch {
		case sb == nil || n > 1:
			fmt.Fprintf(os.Stderr, "corral: %s: killing the sandbox\n", sig)
			if kill != nil {
				kill()
			}
		default:
			_ = sb.Signal(sig)
		}
	}
}

// logf writes one line to the supervisor's stderr: supervisor.log, with
// a UTC timestamp; the caller's terminal in the foreground.
func (s *supervisor) logf(format string, args ...any) {
	prefix := "corral service: "
	if s.o.Foreground == nil {
		prefix = time.Now().UTC().Format(time.RFC3339) + " " + prefix
	}
	fmt.Fprintf(os.Stderr, prefix+format+"\n", args...)
}

func (s *supervisor) tell(m launchMsg) {
	detached.Tell(s.launch, m)
	s.launch = nil
}

// write saves the status (the supervisor is its only writer; writeMu
// keeps its goroutines from racing on the temporary file).
func (s *supervisor) write() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	s.status.Updated = time.Now().UTC()
	if s.log != nil {
		a := s.log.Stats()
		s.status.Audit = &a
	}
	st := s.status
	s.mu.Unlock()
	if err := atomicfile.WriteJSON(s.p.Status(), st, 0o600); err != nil {
		s.logf("status: %v", err)
	}
}

func (s *supervisor) set(f func(st *Status)) {
	s.mu.Lock()
	f(&s.status)
	s.mu.Unlock()
	s.write()
}

// stop asks the running workload to end (SIGTERM) and the loop not to
// restart it; after the grace period it is killed.
func (s *supervisor) stop() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	close(s.stopCh)
	sb := s.sess
	s.status.State = StateStopping
	s.mu.Unlock()
	s.write()
	if sb != nil {
		_ = sb.Signal(syscall.SIGTERM)
	}
}

func (s *supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// loop runs the workload, one fresh sandbox per run, until it ends for
// good: stopped, not to be restarted, or a sandbox that cannot start.
func (s *supervisor) loop(ctx context.Context) int {
	backoff := backoffMin
	for {
		t0 := time.Now()
		ex, err := s.runOnce(ctx)
		if err != nil {
			return s.fail(err)
		}
		stopping := s.isStopping()
		restart := !stopping && (s.st.Restart == "always" || (s.st.Restart == "on-failure" && ex.Code != 0))
		s.set(func(st *Status) {
			st.LastExit = &ex
			st.Workload, st.Init, st.SandboxID, st.Ready = Proc{}, Proc{}, "", nil
			switch {
			case stopping:
				st.State = StateStopped
			case restart:
				st.State = StateBackoff
			default:
				st.State = StateFailed
				if ex.Code == 0 {
					st.State = StateStopped // ended by itself, successfully, restart never/on-failure
				}
			}
		})
		if !restart {
			if s.o.Foreground != nil {
				if s.planted > 0 && s.o.StrictTree {
					s.logf("--strict-tree: the workload left %d planted path(s) (listed above; it exited %d)", s.planted, ex.Code)
					return provider.CodePlanted.ExitCode()
				}
				return ex.Code
			}
			return 0
		}
		if time.Since(t0) > backoffReset {
			backoff = backoffMin
		}
		s.logf("workload ended (exit %d%s); restarting in %s", ex.Code, WithSignal(ex.Signal), backoff)
		select {
		case <-time.After(backoff):
		case <-s.stopCh:
			s.set(func(st *Status) { st.State = StateStopped })
			return 0
		}
		backoff = min(backoff*2, backoffMax)
		s.set(func(st *Status) { st.Restarts++; st.State = StateStarting })
	}
}

// WithSignal is ", SIG" for a signal name, "" for none.
func WithSignal(sig string) string {
	if sig == "" {
		return ""
	}
	return ", " + sig
}

// runOnce runs the workload in a fresh sandbox and returns how it ended.
// The error is for a sandbox that could not be made or started.
func (s *supervisor) runOnce(ctx context.Context) (Exit, error) {
	if s.runs++; s.runs > 1 {
		// The tree is the workload's: a link it planted in the last run
		// must not redirect a grant in this one (policy checkLinks).
		if err := s.replan(ctx); err != nil {
			return Exit{}, err
		}
	}
	// Each run is a new session, which reads the file and command sources
	// again; env sources are the launcher's, handed over at start.
	sess, err := session.Open(ctx, session.Config{Provider: linux.New(), Plan: s.plan, Log: s.log, Version: s.o.Version, Command: s.st.Command, Environ: s.o.Environ,
		Warn: func(msg string) { s.logf("%s", msg) }})
	if err != nil {
		return Exit{}, err
	}
	if b := sess.Consent(); b != nil {
		s.hub.Add(b)
		defer s.hub.Remove(sess.ID())
	}
	defer func() {
		_ = sess.Close()
		// After Close: its placeholders are removed.
		strict := s.o.StrictTree && s.o.Foreground != nil
		s.planted += len(sess.CheckPlanted(os.Stderr, strict))
	}()
	s.mu.Lock()
	if early := s.early; early != 0 {
		s.mu.Unlock()
		return Exit{Code: 128 + int(early), Signal: unix.SignalName(early), Reason: "signalled before the workload started", At: time.Now().UTC()}, nil
	}
	s.sess = sess
	stopping := s.stopping
	s.status.Layers, s.status.SandboxID, s.status.Credentials = sess.Layers(), sess.ID(), sess.Credentials()
	if hv, ok := sess.Sandbox().(provider.HostView); ok {
		s.status.Init = ProcOf(hv.InitPID())
		s.status.CgroupDir, s.status.CgroupLimits = hv.Cgroup()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.sess = nil
		s.mu.Unlock()
	}()
	if stopping && s.o.Foreground == nil {
		return Exit{Code: 143, Signal: "SIGTERM", Reason: "stopped before the workload started", At: time.Now().UTC()}, nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.kill = cancel
	s.mu.Unlock()
	probeDone := make(chan struct{})
	started := false
	spec := provider.ExecSpec{Args: s.st.Command, Started: func(pid int) {
		started = true
		s.set(func(st *Status) {
			st.Workload, st.State, st.Started = ProcOf(pid), StateRunning, time.Now().UTC()
		})
		s.tell(launchMsg{Started: true, PID: pid})
		go s.probe(sess, probeDone)
	}}
	if f := s.o.Foreground; f != nil {
		spec.Stdin, spec.Stdout, spec.Stderr = f.Stdin, f.Stdout, f.Stderr
	} else {
		out, err := newLogPipe(s.p.Workload())
		if err != nil {
			return Exit{}, err
		}
		defer out.Close()
		spec.Stdout, spec.Stderr = out.w, out.w
		defer out.closeWriter()
	}
	// The grace period: after a stop's SIGTERM, the workload is killed.
	// (In the foreground, signals are the caller's to repeat.)
	go func() {
		if s.o.Foreground != nil {
			return
		}
		select {
		case <-s.stopCh:
			select {
			case <-time.After(time.Duration(s.st.StopGrace)):
				s.logf("the workload did not end within %s of SIGTERM: killing it", time.Duration(s.st.StopGrace))
				cancel()
			case <-runCtx.Done():
			}
		case <-runCtx.Done():
		}
	}()
	killed := func() string {
		if runCtx.Err() != nil && ctx.Err() == nil {
			return "killed by the supervisor (stop grace expired, or a second signal)"
		}
		return ""
	}
	es, err := sess.Exec(runCtx, session.Exec{ExecSpec: spec, UID: s.rec.UID, Killed: killed})
	close(probeDone)
	ex := Exit{Code: es.Code, Signal: es.Signal, Reason: es.Reason, At: time.Now().UTC()}
	var pe *provider.Error
	switch {
	case ex.Reason != "":
	case killed() != "":
		ex.Reason = killed()
	case errors.As(err, &pe):
		ex.Reason = pe.Msg
	case err != nil:
		ex.Reason = err.Error()
	}
	if errors.As(err, &pe) && pe.Code == provider.CodeExecFailed && !started {
		return ex, &provider.Error{Code: provider.CodeExecFailed, Msg: ex.Reason} // never ran: not worth restarting
	}
	return ex, nil
}

// replan resolves and maps the session's policy again, as at every start
// of its workload: the home may have changed since (a planted link).
func (s *supervisor) replan(ctx context.Context) error {
	rec := s.rec
	plan, pol, err := Plan(ctx, rec, rec.Start)
	if err != nil {
		return err
	}
	if plan.Loss.HasErrors() {
		return provider.RejectedIn(pol, plan.Loss)
	}
	if plan.Policy.Hash != rec.PolicyHash {
		return &provider.Error{Code: provider.CodePolicyRejected, Msg: fmt.Sprintf("%s changed since the session was provisioned (%s, now %s), or this corral's defaults for what it leaves out differ from those of the corral that provisioned it (an upgrade: the protected list, network.unix_sockets): corral does not run a policy it did not check; export the session, then deprovision and import it, or provision it again", s.p.Policy(), rec.PolicyHash, plan.Policy.Hash)}
	}
	if plan.Policy.Network == policy.NetworkHost && len(rec.Start.Publish) > 0 {
		return &provider.Error{Code: provider.CodePolicyRejected, Msg: "network.mode host: the workload's ports are the host's already; --publish applies to sessions with their own network (none or proxy)"}
	}
	s.mu.Lock()
	s.plan = plan
	s.status.Loss = plan.Loss
	s.mu.Unlock()
	return nil
}

// probe checks readiness until the workload's run ends: after 50 ms,
// doubling to 500 ms, until ready, then every probeEvery. Without a
// readiness check it records nothing.
func (s *supervisor) probe(sess *session.Session, done <-chan struct{}) {
	if s.st.ReadyPort == 0 && s.st.ReadyHTTP == "" {
		return
	}
	wait := 50 * time.Millisecond
	for {
		r := Check(s.st, dialer(sess, 2*time.Second))
		s.mu.Lock()
		current := s.sess == sess
		if current {
			s.status.Ready = &r
		}
		s.mu.Unlock()
		if !current {
			return
		}
		s.write()
		if wait = min(2*wait, 500*time.Millisecond); r.OK {
			wait = probeEvery
		}
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
	}
}

// dialer connects to ports on the session's loopback (the linux
// provider's sandboxes are provider.PortDialers; nil for one that is not).
func dialer(sess *session.Session, timeout time.Duration) func(port int) (net.Conn, error) {
	pd, ok := sess.Sandbox().(provider.PortDialer)
	if !ok {
		return nil
	}
	return func(port int) (net.Conn, error) { return pd.DialServed(port, timeout) }
}

// Check runs the readiness checks of st: a TCP connect to ReadyPort
// through dial (inside the session), and an HTTP GET of ReadyHTTP from
// the host that must answer 2xx, each within 2 s.
func Check(st *StartSpec, dial func(port int) (net.Conn, error)) Probe {
	r := Probe{OK: true, At: time.Now().UTC()}
	var parts []string
	if st.ReadyPort != 0 && dial != nil {
		c, err := dial(st.ReadyPort)
		if err != nil {
			r.OK = false
			parts = append(parts, fmt.Sprintf("port %d: %v", st.ReadyPort, err))
		} else {
			c.Close()
			parts = append(parts, fmt.Sprintf("port %d accepts connections", st.ReadyPort))
		}
	}
	if st.ReadyHTTP != "" {
		// Never follow a redirect: the workload answers this request, and
		// a probe from the host must not become its way to other hosts.
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(st.ReadyHTTP)
		switch {
		case err != nil:
			r.OK = false
			parts = append(parts, err.Error())
		case resp.StatusCode/100 != 2:
			r.OK = false
			parts = append(parts, fmt.Sprintf("GET %s: %s", st.ReadyHTTP, resp.Status))
		default:
			parts = append(parts, fmt.Sprintf("GET %s: %s", st.ReadyHTTP, resp.Status))
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
		}
	}
	r.Detail = Printable(strings.Join(parts, "; ")) // the workload wrote part of it
	return r
}

// publish listens on each published host address and forwards every
// connection to its port on the session's loopback, while a workload
// runs; otherwise the connection is closed.
func (s *supervisor) publish() ([]net.Listener, error) {
	var ls []net.Listener
	for _, pub := range s.st.Publish {
		l, err := net.Listen("tcp", pub.Host)
		if err != nil {
			for _, o := range ls {
				o.Close()
			}
			return nil, &provider.Error{Code: provider.CodeStartFailed, Msg: fmt.Sprintf("--publish %s:%d: %v", pub.Host, pub.Port, err)}
		}
		ls = append(ls, l)
		go s.forward(l, pub.Port)
	}
	return ls, nil
}

// A published port carries at most maxForwards connections at a time
// (more are closed at once), and once one side of a connection has
// closed, the other gets halfCloseGrace to finish: a workload that never
// closes its end cannot pile up the supervisor's descriptors.
const (
	maxForwards    = 1024
	halfCloseGrace = 30 * time.Second
)

func (s *supervisor) forward(l net.Listener, port int) {
	slots := make(chan struct{}, maxForwards)
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-slots }()
			defer c.Close()
			s.mu.Lock()
			sess := s.sess
			s.mu.Unlock()
			if sess == nil {
				return
			}
			dial := dialer(sess, 10*time.Second)
			if dial == nil {
				return
			}
			up, err := dial(port)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
			<-done
			select {
			case <-done:
			case <-time.After(halfCloseGrace):
			}
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

// logPipe carries the workload's output (stdout and stderr, merged, as
// journald keeps them) to workload.log, rotating it at logMax.
type logPipe struct {
	w    *os.File
	r    *os.File
	done chan struct{}
}

func newLogPipe(path string) (*logPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	lp := &logPipe{w: w, r: r, done: make(chan struct{})}
	go func() {
		defer close(lp.done)
		defer r.Close()
		f, n, err := openLog(path)
		if err != nil {
			_, _ = io.Copy(io.Discard, r)
			return
		}
		buf := make([]byte, 32<<10)
		for {
			k, rerr := r.Read(buf)
			if k > 0 {
				if n+int64(k) > logMax {
					f.Close()
					_ = os.Rename(path, path+".1")
					if f, n, err = openLog(path); err != nil {
						_, _ = io.Copy(io.Discard, r)
						return
					}
				}
				w, _ := f.Write(buf[:k])
				n += int64(w)
			}
			if rerr != nil {
				f.Close()
				return
			}
		}
	}()
	return lp, nil
}

func openLog(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// closeWriter closes the supervisor's write end, so the copy ends when
// the workload's copies are closed too.
func (l *logPipe) closeWriter() {
	if l.w != nil {
		l.w.Close()
		l.w = nil
	}
}

// Close waits (briefly) for the last output to be written.
func (l *logPipe) Close() {
	l.closeWriter()
	select {
	case <-l.done:
	case <-time.After(2 * time.Second):
	}
}
