package isolation

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/rmtree"
	"github.com/corral-sandbox/corral/internal/safetar"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/mxc"
	"github.com/corral-sandbox/corral/service"
	"github.com/corral-sandbox/corral/session"
)

// Manager is the launcher: every lifecycle operation on the sessions
// under Base, each a short-lived process of the caller's outside the
// boundary.
type Manager struct {
	Base string
	// Provider returns the mxc provider, on its isolation_session
	// backend, keeping its records in stateDir (DIR/mxc).
	Provider func(stateDir string) *mxc.Provider
	// Resolve loads and resolves a policy file for the session.
	Resolve func(path string) (*policy.Resolved, error)
	Version string
	// Mock is set when the executor is the stand-in (its probe's tier
	// "mock"): status says that nothing it shows is evidence.
	Mock bool
}

// FaultEnv, for crash tests, names a point at which the launcher kills
// itself (SIGKILL; TerminateProcess on Windows): provision-after-intent,
// provision-after-session, start-after-stage, deprovision-after-intent.
const FaultEnv = "CORRAL_SERVICE_FAULT"

func fault(point string) {
	if os.Getenv(FaultEnv) == point {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Kill()
		}
		time.Sleep(time.Second)
	}
}

// MockNote is what status and provision say on the stand-in.
const MockNote = "mock — not evidence of OS enforcement"

// Boundary is what an isolation_session gives, said wherever its posture
// is shown: an identity boundary, not a filesystem or network one.
const Boundary = "identity boundary: the gateway runs as an agent user MXC minted for this session, in that user's own Windows session and profile; no filesystem grants (the agent user reads what host ACLs let any user read) and no network filtering (default-allow egress with local network)"

func (m *Manager) paths(name string) (Paths, error) {
	if err := service.ValidName(name); err != nil {
		return Paths{}, provider.Errorf(provider.CodePolicyRejected, "%v", err)
	}
	return PathsOf(m.Base, name), nil
}

// open locks session name and reads its record.
func (m *Manager) open(name string) (Paths, *Record, func(), error) {
	p, err := m.paths(name)
	if err != nil {
		return p, nil, nil, err
	}
	if _, err := os.Lstat(p.Record()); errors.Is(err, os.ErrNotExist) {
		return p, nil, nil, provider.Errorf(provider.CodeNotFound, "no such service: %s (corral service list shows the provisioned ones)", name)
	}
	unlock, err := lock(p, 5*time.Second)
	if err != nil {
		return p, nil, nil, provider.Wrap(provider.CodeStale, "", err)
	}
	rec, err := LoadRecord(p)
	if err != nil {
		unlock()
		if errors.Is(err, ErrNotFound) {
			return p, nil, nil, provider.Wrap(provider.CodeNotFound, "", err)
		}
		return p, nil, nil, err
	}
	return p, rec, unlock, nil
}

// plan maps the session's recorded policy; it must be the one provisioned.
func (m *Manager) plan(ctx context.Context, p Paths, rec *Record) (provider.Provider, *provider.Plan, error) {
	r, err := m.Resolve(p.Policy())
	if err != nil {
		return nil, nil, err
	}
	if rec != nil && rec.PolicyHash != "" && r.Hash != rec.PolicyHash {
		return nil, nil, provider.Errorf(provider.CodePolicyRejected, "%s changed since provision (hash %s, provisioned %s): provision again", p.Policy(), r.Hash, rec.PolicyHash)
	}
	prov := m.Provider(p.MXCState())
	plan, err := session.Plan(ctx, prov, r)
	if err != nil {
		return nil, nil, err
	}
	plan.Loss = append(plan.Loss, provider.Loss{Severity: provider.SeverityWarning, Area: "service", Field: "network.mode", Message: Boundary})
	return prov, plan, nil
}

func (m *Manager) config(p Paths, prov provider.Provider, plan *provider.Plan, log *audit.Log, cmd []string) session.Config {
	return session.Config{Provider: prov, Plan: plan, Log: log, Version: m.Version, Command: cmd,
		Options: provider.ProvisionOptions{Persistent: true, Owner: "corral-service:" + filepath.Base(p.Dir)}}
}

func (m *Manager) auditLog(p Paths) (*audit.Log, error) {
	return audit.OpenLog(filepath.Join(p.Dir, "audit.jsonl"), audit.LogOptions{MaxBytes: 64 << 20})
}

// Provision makes session name from the policy at policyPath: a
// write-ahead record (phase provisioning), the policy copy, then the MXC
// session through the session core (provision and start: an
// IsolationSession cannot be restarted in place, so it is started once
// and the gateway inside it is what start and stop manage), then the
// record with its sandbox, agent user and staging directory (phase
// ready). A plan with error losses is refused before anything is made
// and undone; a provision that died without naming its session is left
// as an orphan record for reconcile, never retried.
func (m *Manager) Provision(ctx context.Context, name, policyPath string) (*Record, provider.LossReport, error) {
	p, err := m.paths(name)
	if err != nil {
		return nil, nil, err
	}
	pol, err := os.ReadFile(policyPath)
	if err != nil {
		return nil, nil, provider.Wrap(provider.CodePolicyRejected, "policy", err)
	}
	// Errors at positions in the caller's file, not in the copy below.
	if _, err := m.Resolve(policyPath); err != nil {
		return nil, nil, err
	}
	if err := privateDir(m.Base); err != nil {
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "service directory "+m.Base, err)
	}
	if err := os.Mkdir(p.Dir, 0o700); errors.Is(err, os.ErrExist) {
		return nil, nil, provider.Errorf(provider.CodeStale, "service %s exists (%s): deprovision it first, or pick another name", name, p.Dir)
	} else if err != nil {
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "", err)
	}
	undo := func() { rmtree.RemoveAll(p.Dir) }
	if err := privateDir(p.Dir); err != nil {
		undo()
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "", err)
	}
	unlock, err := lock(p, 0)
	if err != nil {
		undo()
		return nil, nil, err
	}
	defer unlock()
	undo = func() { _ = removeDir(p, unlock) }
	rec := &Record{Name: name, Dir: p.Dir, Phase: PhaseProvisioning, Created: time.Now().UTC()}
	if err := atomicfile.Write(p.Policy(), pol, 0o600); err == nil {
		err = rec.Save()
	}
	if err != nil {
		undo()
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "", err)
	}
	prov, plan, err := m.plan(ctx, p, nil)
	if err != nil {
		undo()
		return nil, nil, err
	}
	if plan.Loss.HasErrors() {
		undo()
		return nil, plan.Loss, provider.Rejected(plan.Loss)
	}
	rec.PolicyHash = plan.Policy.Hash
	if err := rec.Save(); err != nil {
		undo()
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "", err)
	}
	log, err := m.auditLog(p)
	if err != nil {
		undo()
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "audit log", err)
	}
	defer log.Close()
	undo = func() { log.Close(); _ = removeDir(p, unlock) } // Windows deletes no open file
	fault("provision-after-intent")
	s, err := session.Open(ctx, m.config(p, prov, plan, log, nil))
	if err != nil {
		if orphans := m.orphans(p); len(orphans) > 0 {
			// Something may exist that nothing names: keep the record for
			// the operator (reconcile lists it), never provision over it.
			return nil, nil, provider.Errorf(provider.CodeOf(err), "%v; the record %s is kept: %s", err, p.Record(), orphans[0])
		}
		undo()
		return nil, nil, err
	}
	s.Detach()
	fault("provision-after-session")
	pers, ok := s.Sandbox().(provider.Persistent)
	if !ok {
		_ = s.Close()
		undo()
		return nil, nil, provider.Errorf(provider.CodeInternal, "the mxc sandbox is not persistent")
	}
	rec.Sandbox, rec.State = s.ID(), pers.State()
	if r, ok := s.Sandbox().(interface{ Record() mxc.Record }); ok {
		mr := r.Record()
		var md struct{ AgentUserName, AgentUserSid, EphemeralWorkspacePath string }
		_ = json.Unmarshal(mr.Metadata, &md)
		rec.SandboxID, rec.AgentUser, rec.AgentSID, rec.Staging = mr.SandboxID, md.AgentUserName, md.AgentUserSid, md.EphemeralWorkspacePath
	}
	rec.Phase = PhaseReady
	if rec.Staging == "" || !filepath.IsAbs(rec.Staging) {
		err = fmt.Errorf("MXC's provision named no staging directory (ephemeralWorkspacePath %q)", rec.Staging)
	} else {
		err = rec.Save()
	}
	if err != nil {
		_ = s.Close() // stop and deprovision what was made
		undo()
		return nil, nil, provider.Wrap(provider.CodeProvisionFailed, "", err)
	}
	return rec, plan.Loss, nil
}

// orphans describes the mxc provider's orphan records of session p: a
// provision that never named its session, so an agent user may exist
// that no launcher can address.
func (m *Manager) orphans(p Paths) []string {
	list, _ := m.Provider(p.MXCState()).Orphans()
	var out []string
	for _, r := range list {
		out = append(out, fmt.Sprintf("provision of %s never returned a sandboxId (%s): an MXC agent user may exist that Corral cannot name; remove it by hand (the host's agent users), then: corral service reconcile --forget %s", r.LocalID, r.LastError, filepath.Base(p.Dir)))
	}
	return out
}

// attach reattaches to the session's sandbox through the session core (a
// ready session, or one being removed), with the session's audit log;
// release detaches and closes the log.
func (m *Manager) attach(ctx context.Context, p Paths, rec *Record) (s *session.Session, release func(), err error) {
	if rec.Phase == PhaseProvisioning {
		return nil, nil, provider.Errorf(provider.CodeStale, "service %s is %s: corral service reconcile finishes or undoes it", rec.Name, rec.Phase)
	}
	prov, plan, err := m.plan(ctx, p, rec)
	if err != nil {
		return nil, nil, err
	}
	log, err := m.auditLog(p)
	if err != nil {
		return nil, nil, err
	}
	s, err = session.Recover(ctx, m.config(p, prov, plan, log, nil), rec.State)
	if err != nil {
		log.Close()
		return nil, nil, err
	}
	return s, func() { s.Detach(); log.Close() }, nil
}

// inSession runs `corral __service-session ARGS` in the session with
// the in-session corral bin (the staged one for start) and returns its
// exit code and stdout, at most maxOut bytes: the agent's output,
// untrusted.
func (m *Manager) inSession(ctx context.Context, s *session.Session, p Paths, bin string, args []string, maxOut int64) (int, []byte, error) {
	// The in-session corral is the agent's to replace: one that never
	// answers must not hold the launcher (and the session's lock).
	ctx, cancel := context.WithTimeout(ctx, inSessionTimeout)
	defer cancel()
	out, err := os.CreateTemp(p.Dir, "exec-*.out")
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	errf, err := os.CreateTemp(p.Dir, "exec-*.err")
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	argv := append([]string{bin, SessionCommand}, args...)
	st, err := s.Exec(ctx, session.Exec{ExecSpec: provider.ExecSpec{Args: argv, Stdout: out, Stderr: errf}, UID: -1})
	if err != nil {
		return 0, nil, err
	}
	b, _ := readLimited(out.Name(), maxOut)
	if st.Code != 0 {
		diag, _ := readLimited(errf.Name(), 4096)
		if d := strings.TrimSpace(lastLines(string(diag), 5)); d != "" {
			return st.Code, b, errors.New(service.Printable(d))
		}
	}
	return st.Code, b, nil
}

func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// inSessionTimeout bounds one in-session command: the longest, start,
// waits 15 s for the supervisor's first status; stop waits the stop
// grace plus 10 s (a grace above 2 minutes is cut short here).
const inSessionTimeout = 3 * time.Minute

// maxStatus bounds an in-session status answer.
const maxStatus = 64 << 10

// sessionStatus asks the in-session corral for the supervisor's status.
func (m *Manager) sessionStatus(ctx context.Context, s *session.Session, p Paths, rec *Record) (*SessionStatus, error) {
	bin := rec.corral()
	if bin == "" {
		return &SessionStatus{State: StateNotStarted}, nil
	}
	_, out, err := m.inSession(ctx, s, p, bin, []string{"status"}, maxStatus)
	if err != nil {
		return nil, err
	}
	return parseStatus(out)
}

// corral is the in-session corral the last start materialised ("" before
// the first start), as the session reported it: it only ever runs inside.
func (r *Record) corral() string { return r.SessionCorral }

// stage makes a fresh directory in the staging directory — a random name,
// made through os.Root so that no link the agent user planted there is
// followed — and returns its host path and root.
func stage(rec *Record) (string, *os.Root, func(), error) {
	root, err := os.OpenRoot(rec.Staging)
	if err != nil {
		return "", nil, nil, provider.Wrap(provider.CodeStartFailed, "the session's staging directory", err)
	}
	// The agent user may have replaced the staging directory with a link
	// (a junction) to a directory of its choosing, where the caller would
	// then write: the directory opened must be the one at the path, itself.
	held, herr := root.Stat(".")
	cur, cerr := os.Lstat(rec.Staging)
	if herr != nil || cerr != nil || cur.Mode().Type() != os.ModeDir || !os.SameFile(held, cur) {
		root.Close()
		return "", nil, nil, provider.Errorf(provider.CodeStartFailed, "the session's staging directory %s is not a plain directory (a link or a junction put there?): refused", rec.Staging)
	}
	var rb [16]byte
	_, _ = rand.Read(rb[:])
	name := "corral-" + hex.EncodeToString(rb[:])
	if err := root.Mkdir(name, 0o700); err != nil {
		root.Close()
		return "", nil, nil, provider.Wrap(provider.CodeStartFailed, "staging", err)
	}
	sub, err := root.OpenRoot(name)
	if err != nil {
		root.Close()
		return "", nil, nil, provider.Wrap(provider.CodeStartFailed, "staging", err)
	}
	cleanup := func() {
		sub.Close()
		_ = root.RemoveAll(name)
		root.Close()
	}
	return filepath.Join(rec.Staging, name), sub, cleanup, nil
}

// writeStaged writes name in the stage from r (created new, never over
// an existing name) and returns its SHA-256.
func writeStaged(root *os.Root, name string, write func(io.Writer) error) (string, error) {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = write(io.MultiWriter(f, h))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// stageCorral writes this corral binary into the stage and returns its
// SHA-256, which the in-session side checks its copy against.
func stageCorral(root *os.Root) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	sum, err := writeStaged(root, stagedCorral, func(w io.Writer) error {
		f, err := os.Open(self)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		return "", provider.Wrap(provider.CodeStartFailed, "staging corral", err)
	}
	return sum, nil
}

// Start starts the session's workload: the spec recorded (desired
// running), corral and the payload staged, the in-session start run
// (which materialises them in the profile and starts the supervisor
// detached), then readiness awaited from the host and the settle window.
// A workload not up in time is stopped again. spec nil: the recorded one.
func (m *Manager) Start(ctx context.Context, name string, spec *StartSpec) (st *SessionStatus, err error) {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec.Phase != PhaseReady {
		return nil, provider.Errorf(provider.CodeStale, "service %s is %s: corral service reconcile finishes or undoes it", name, rec.Phase)
	}
	if spec == nil {
		spec = rec.Start
	}
	if spec == nil {
		return nil, provider.Errorf(provider.CodePolicyRejected, "service %s has never been started: give the command (corral service start %s -- CMD...)", name, name)
	}
	if err := spec.Validate(); err != nil {
		return nil, provider.Wrap(provider.CodePolicyRejected, "", err)
	}
	if fi, err := os.Stat(spec.Payload); spec.Payload != "" && (err != nil || !fi.IsDir()) {
		return nil, provider.Errorf(provider.CodePolicyRejected, "start: payload %q: want a directory (its files are copied into the session at each start)", spec.Payload)
	}
	s, release, err := m.attach(ctx, p, rec)
	if err != nil {
		return nil, err
	}
	defer release()
	if cur, err := m.sessionStatus(ctx, s, p, rec); err == nil && cur.State != StateNotStarted && cur.State != StateStopped && cur.State != StateFailed && cur.State != StateDead {
		return cur, provider.Errorf(provider.CodeStale, "service %s is %s already (supervisor pid %d): corral service restart %s", name, cur.State, cur.Supervisor.PID, name)
	}
	rec.Start, rec.Desired = spec, "running"
	if err := rec.Save(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil { // nothing runs: a start that failed is not wanted running
			rec.Desired = "stopped"
			_ = rec.Save()
		}
	}()
	dir, root, cleanup, err := stage(rec)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	args := []string{"start", "--stage", dir}
	sum, err := stageCorral(root)
	if err != nil {
		return nil, err
	}
	args = append(args, "--sha256", stagedCorral+"="+sum)
	if spec.Payload != "" {
		sum, err := writeStaged(root, stagedPayload, func(w io.Writer) error {
			_, err := safetar.Pack(w, spec.Payload, safetar.Limits{}, nil)
			return err
		})
		if err != nil {
			return nil, provider.Wrap(provider.CodeStartFailed, "staging the payload "+spec.Payload, err)
		}
		args = append(args, "--sha256", stagedPayload+"="+sum)
	}
	sp, _ := json.Marshal(sessionSpec{Command: spec.Command, Restart: spec.Restart, StopGrace: spec.StopGrace})
	args = append(args, "--spec", base64.StdEncoding.EncodeToString(sp))
	fault("start-after-stage")
	// From here the workload may run and change its state: an export
	// must come after this for deprovision.
	rec.LastStart = time.Now().UTC()
	if err := rec.Save(); err != nil {
		return nil, err
	}
	code, out, err := m.inSession(ctx, s, p, filepath.Join(dir, stagedCorral), args, maxStatus)
	st, perr := parseStatus(out)
	if perr == nil && st.Corral != "" && filepath.IsAbs(st.Corral) && service.Printable(st.Corral) == st.Corral {
		rec.SessionCorral = st.Corral
		_ = rec.Save()
	}
	if code == exitRunning {
		return st, provider.Errorf(provider.CodeStale, "service %s runs already: %v (corral service restart %s)", name, err, name)
	}
	if err != nil || code != 0 {
		return st, provider.Errorf(provider.CodeStartFailed, "the in-session start exited %d: %v", code, err)
	}
	if perr != nil {
		return nil, provider.Wrap(provider.CodeStartFailed, "", perr)
	}
	if err := m.awaitReady(ctx, s, p, rec, st); err != nil {
		_, _, _ = m.inSession(context.WithoutCancel(ctx), s, p, rec.corral(), []string{"stop"}, maxStatus)
		return st, err
	}
	return st, nil
}

// awaitReady waits for spec's readiness probes (from the host: the
// session shares its network) until its timeout, then for the settle
// window, in which the workload must stay the same process.
func (m *Manager) awaitReady(ctx context.Context, s *session.Session, p Paths, rec *Record, first *SessionStatus) error {
	spec := rec.Start
	deadline := time.Now().Add(spec.Timeout())
	asked := time.Now()
	for wait := 50 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		pr := probe(ctx, spec)
		if pr.OK {
			break
		}
		if ctx.Err() != nil {
			return provider.Wrap(provider.CodeStartFailed, "interrupted before service "+rec.Name+" was ready", ctx.Err())
		}
		if time.Now().After(deadline) {
			return provider.Errorf(provider.CodeTimeout, "service %s was not ready in %s: %s", rec.Name, spec.Timeout(), pr.Detail)
		}
		// Every few seconds, whether the supervisor still runs it: a
		// workload that died or failed ends the wait (an exec each time).
		if time.Since(asked) > 3*time.Second {
			asked = time.Now()
			if now, err := m.sessionStatus(ctx, s, p, rec); err == nil && now.State != StateRunning && now.State != StateStarting && now.State != StateBackoff {
				return provider.Errorf(provider.CodeStartFailed, "service %s did not come up: %s %s", rec.Name, now.State, service.Printable(now.Error))
			}
		}
		time.Sleep(wait)
	}
	if spec.Settle > 0 {
		select {
		case <-ctx.Done():
			return provider.Wrap(provider.CodeStartFailed, "interrupted", ctx.Err())
		case <-time.After(time.Duration(spec.Settle)):
		}
	}
	now, err := m.sessionStatus(ctx, s, p, rec)
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "", err)
	}
	if now.State != StateRunning || now.Workload != first.Workload {
		return provider.Errorf(provider.CodeStartFailed, "service %s did not stay up: %s (restarts %d) %s", rec.Name, now.State, now.Restarts, service.Printable(now.Error))
	}
	return nil
}

// Probe is one readiness check's result, made from the host.
type Probe struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func probe(ctx context.Context, spec *StartSpec) Probe {
	if spec.ReadyPort > 0 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(spec.ReadyPort))
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return Probe{Detail: addr + ": " + err.Error()}
		}
		c.Close()
		if spec.ReadyHTTP == "" {
			return Probe{OK: true, Detail: addr + " accepts connections"}
		}
	}
	if spec.ReadyHTTP != "" {
		cl := &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, spec.ReadyHTTP, nil)
		resp, err := cl.Do(req)
		if err != nil {
			return Probe{Detail: err.Error()}
		}
		resp.Body.Close()
		return Probe{OK: resp.StatusCode/100 == 2, Detail: service.Printable(spec.ReadyHTTP + ": " + resp.Status)}
	}
	return Probe{OK: true, Detail: "no readiness probe"}
}

// Stop records desired stopped and asks the in-session supervisor to
// stop the workload; idempotent.
func (m *Manager) Stop(ctx context.Context, name string) error {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return err
	}
	defer unlock()
	rec.Desired = "stopped"
	if err := rec.Save(); err != nil {
		return err
	}
	return m.stopLocked(ctx, p, rec)
}

func (m *Manager) stopLocked(ctx context.Context, p Paths, rec *Record) error {
	if rec.corral() == "" {
		return nil
	}
	s, release, err := m.attach(ctx, p, rec)
	if err != nil {
		return err
	}
	defer release()
	before, _ := m.sessionStatus(ctx, s, p, rec)
	if _, _, err := m.inSession(ctx, s, p, rec.corral(), []string{"stop"}, maxStatus); err != nil {
		return provider.Wrap(provider.CodeStopFailed, "", err)
	}
	// The in-session stop is the agent's word: the processes the session
	// named before it must be gone, checked from here.
	if before != nil {
		for _, pr := range []Proc{before.Supervisor, before.Workload} {
			for end := time.Now().Add(5 * time.Second); pr.Alive() && time.Now().Before(end); {
				time.Sleep(50 * time.Millisecond) // a job's kill completes asynchronously
			}
			if pr.Alive() {
				return provider.Errorf(provider.CodeStopFailed, "service %s: pid %d, which the session named as its supervisor or gateway, still runs after the stop", rec.Name, pr.PID)
			}
		}
	}
	return nil
}

// Logs writes the last max bytes of the workload's (or the
// supervisor's) log, escaped for a terminal when w is one's.
func (m *Manager) Logs(ctx context.Context, name string, supervisor bool, max int64, w io.Writer) error {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return err
	}
	defer unlock()
	if rec.corral() == "" {
		return nil
	}
	s, release, err := m.attach(ctx, p, rec)
	if err != nil {
		return err
	}
	defer release()
	args := []string{"logs", "--max", strconv.FormatInt(max, 10)}
	if supervisor {
		args = append(args, "--supervisor")
	}
	_, out, err := m.inSession(ctx, s, p, rec.corral(), args, max)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// errBadArchive marks what the agent wrote that the host refused.
func badArchive(err error) error {
	return provider.Wrap(provider.CodeProvisionFailed, "the session's archive was refused", err)
}
