package mxc

// The runner: wxc-exec driven as a program (CONTRACT.md). It is plain Go
// and runs on every OS (it only execs wxc-exec), so it is tested on Linux
// against the stand-in executor in testdata/wxcexec.
//
// process_container is one-shot: Provision only binds the egress listener
// (network proxy), Start does nothing, and each Exec is one wxc-exec run
// whose exit code is the workload's. A persistent process_container
// sandbox (a control plane's) is container.go's: one wxc-exec running the
// relay, driven over its stdio.
//
// isolation_session is state-aware and durable: each lifecycle method is
// one wxc-exec phase under a per-sandbox lifecycle lock, and a record in
// the state directory (record.go) is written before provision is tried, so
// a crash can never lose an agent user silently.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/rmtree"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Provider is the MXC provider: the mapper plus the wxc-exec runner.
type Provider struct {
	cfg      Config
	stateDir string
}

// New returns the MXC provider for cfg. stateDir holds the durable records
// of isolation_session sandboxes (created 0700 when first needed); the
// process_container backend does not use it.
func New(cfg Config, stateDir string) *Provider {
	return &Provider{cfg: cfg.withDefaults(), stateDir: stateDir}
}

var (
	_ provider.Provider   = (*Provider)(nil)
	_ provider.Persistent = (*session)(nil)
)

func (p *Provider) Name() string { return Name }

// installFix is the fix Probe and Provision give when wxc-exec is missing.
const installFix = "install MXC and put wxc-exec on PATH or set the path in the provider config"

// wxcExec resolves the executor: the configured path, else wxc-exec in
// PATH.
func (p *Provider) wxcExec() (string, error) {
	if p.cfg.WxcExec != "" {
		if _, err := os.Stat(p.cfg.WxcExec); err != nil {
			return "", fmt.Errorf("wxc-exec %s: %w", p.cfg.WxcExec, err)
		}
		return p.cfg.WxcExec, nil
	}
	path, err := exec.LookPath("wxc-exec")
	if err != nil {
		return "", fmt.Errorf("wxc-exec not found in PATH: %w", err)
	}
	return path, nil
}

// probeReport is wxc-exec --probe's JSON.
type probeReport struct {
	Tier                  string   `json:"tier"`
	NeedsDaclAugmentation bool     `json:"needsDaclAugmentation"`
	Warnings              []string `json:"warnings"`
	Probes                struct {
		BaseContainerAPIPresent        bool            `json:"baseContainerApiPresent"`
		BfscfgPresent                  bool            `json:"bfscfgPresent"`
		BaseContainerSupportsDenyPaths bool            `json:"baseContainerSupportsDenyPaths"`
		IsolationSessionAvailable      bool            `json:"isolationSessionAvailable"`
		UICapabilities                 json.RawMessage `json:"uiCapabilities"`
	} `json:"probes"`
}

// Probe runs wxc-exec --probe and reports its findings as facts: tier,
// needs_dacl_augmentation, warnings, base_container_api, bfscfg,
// deny_paths, isolation_session, ui_capabilities. The isolation_session
// backend is unavailable when the probe says sessions are.
func (p *Provider) Probe(ctx context.Context) provider.HostReport {
	rep := provider.HostReport{Provider: Name, Facts: map[string]string{"backend": string(p.cfg.Backend)}}
	bin, err := p.wxcExec()
	if err != nil {
		rep.Reason, rep.Fixes = err.Error(), []string{installFix}
		return rep
	}
	rep.Facts["wxc_exec"] = bin
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--probe")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		rep.Reason = fmt.Sprintf("wxc-exec --probe failed: %v: %s", err, strings.TrimSpace(stderr.String()))
		rep.Fixes = []string{installFix}
		return rep
	}
	var pr probeReport
	if err := json.Unmarshal(stdout.Bytes(), &pr); err != nil {
		rep.Reason = fmt.Sprintf("wxc-exec --probe printed no probe report: %v", err)
		return rep
	}
	yn := strconv.FormatBool
	rep.Facts["tier"] = pr.Tier
	rep.Facts["needs_dacl_augmentation"] = yn(pr.NeedsDaclAugmentation)
	rep.Facts["base_container_api"] = yn(pr.Probes.BaseContainerAPIPresent)
	rep.Facts["bfscfg"] = yn(pr.Probes.BfscfgPresent)
	rep.Facts["deny_paths"] = yn(pr.Probes.BaseContainerSupportsDenyPaths)
	rep.Facts["isolation_session"] = yn(pr.Probes.IsolationSessionAvailable)
	if len(pr.Probes.UICapabilities) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, pr.Probes.UICapabilities) == nil {
			rep.Facts["ui_capabilities"] = c.String()
		}
	}
	if len(pr.Warnings) > 0 {
		rep.Facts["warnings"] = strings.Join(pr.Warnings, "; ")
	}
	if p.cfg.Backend == BackendIsolationSession && !pr.Probes.IsolationSessionAvailable {
		rep.Reason = "wxc-exec reports IsolationSession unavailable on this host"
		rep.Fixes = []string{"use the process_container backend, or a Windows build with IsolationSession"}
		return rep
	}
	rep.Available = true
	return rep
}

// Capabilities is the mapper's static description of the backend.
func (p *Provider) Capabilities(ctx context.Context) provider.Capabilities {
	return Capabilities(p.cfg)
}

// placeholderProxy is the listener address Map plans with. The real
// listener is bound by Provision (net.Listen on 127.0.0.1:0, an ephemeral
// port that cannot be known earlier without holding a socket open for
// plans that may never run, such as `policy explain`), which then
// re-derives the network fragment of the document with the real port. The
// plan shows port 0, "ephemeral, chosen at provision".
const placeholderProxy = "127.0.0.1:1"

// Map maps r with the provider's configuration. For network proxy the
// document's runtimeConfig.networkProxy is http://127.0.0.1:0 until
// Provision binds the real port.
func (p *Provider) Map(ctx context.Context, r *policy.Resolved) (*provider.Plan, provider.LossReport) {
	plan := NewPlan(r, p.cfg, placeholderProxy)
	if d, ok := plan.Details.(*Details); ok && d.Request != nil && d.Request.RuntimeConfig != nil && d.Request.RuntimeConfig.NetworkProxy != "" {
		d.Request.RuntimeConfig.NetworkProxy = "http://127.0.0.1:0"
		for i, l := range plan.Loss {
			if l.Field == "network.mode" {
				plan.Loss[i].Message = strings.ReplaceAll(l.Message, placeholderProxy, "127.0.0.1:<ephemeral port bound at provision>")
			}
		}
	}
	return plan, plan.Loss
}

// envSecrets are the values a document injects into the workload: every
// process.env value (variables passed from the caller and set by the
// policy alike), except those of publicEnv, whose values are machine facts
// that would otherwise be masked wherever they appear (every "xterm" or
// "C.UTF-8" in the workload's stderr).
func envSecrets(req *Request) []string {
	var out []string
	if req == nil || req.Process == nil {
		return nil
	}
	for _, kv := range req.Process.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && !publicEnv[strings.ToUpper(k)] {
			out = append(out, v)
		}
	}
	return out
}

// publicEnv names variables (upper-cased: Windows names are
// case-insensitive) that carry no secret.
var publicEnv = map[string]bool{
	"PATH": true, "PATHEXT": true, "TERM": true, "LANG": true, "LANGUAGE": true, "TZ": true,
	"HOME": true, "USER": true, "USERNAME": true, "SHELL": true, "PWD": true,
	"TMPDIR": true, "TEMP": true, "TMP": true, "SYSTEMROOT": true, "WINDIR": true, "COMSPEC": true,
	// The POSIX locale categories by name (not LC_*: sshd's AcceptEnv LC_*
	// makes LC_ a common carrier for arbitrary values).
	"LC_ALL": true, "LC_CTYPE": true, "LC_COLLATE": true, "LC_MESSAGES": true, "LC_MONETARY": true,
	"LC_NUMERIC": true, "LC_TIME": true,
}

// cloneRequest copies the parts of req the runner changes.
func cloneRequest(req *Request) *Request {
	c := *req
	if req.Process != nil {
		pr := *req.Process
		pr.Env = append([]string(nil), req.Process.Env...)
		c.Process = &pr
	}
	if req.RuntimeConfig != nil {
		rc := *req.RuntimeConfig
		c.RuntimeConfig = &rc
	}
	return &c
}

// Provision creates the sandbox. A plan with error losses is refused with
// CodePolicyRejected before wxc-exec is called.
//
// process_container: binds the egress listener when the plan has network
// proxy (127.0.0.1:<ephemeral> on the host; the document's networkProxy
// and the *_PROXY variables, with a per-sandbox credential, are set to it)
// and nothing else.
//
// isolation_session: writes the record (phase_state provisioning, fsynced)
// and only then runs the provision phase, once: provision is never
// retried. Success persists the sandboxId (provisioned); an error envelope
// marks the record failed; an executor that dies without an envelope leaves
// it provisioning with last_error, an orphan (Orphans, Recover).
//
// opts.ID (provider.NewID's shape), when given, is the sandbox's local
// id; opts.Owner is kept in the record (Managed lists by it).
// opts.Persistent on isolation_session gives a session that outlives the
// caller; on process_container a sandbox of provider.LifetimeManaged
// (container.go): one wxc-exec running the relay for the sandbox's life,
// which ends with the calling process.
func (p *Provider) Provision(ctx context.Context, plan *provider.Plan, opts provider.ProvisionOptions) (provider.Sandbox, error) {
	if plan == nil {
		return nil, provider.Errorf(provider.CodeInternal, "no plan")
	}
	if plan.Loss.HasErrors() {
		return nil, provider.Rejected(plan.Loss)
	}
	d, ok := plan.Details.(*Details)
	if !ok || d.Request == nil {
		return nil, provider.Errorf(provider.CodeInternal, "plan is not an mxc plan")
	}
	if opts.ID != "" && !provider.IsID(opts.ID) {
		return nil, provider.Errorf(provider.CodeInternal, "mxc: sandbox id %q is not of provider.NewID's shape", opts.ID)
	}
	bin, err := p.wxcExec()
	if err != nil {
		return nil, &provider.Error{Code: provider.CodeUnavailable, Msg: installFix, Err: err}
	}
	req := cloneRequest(d.Request)
	base := &sandboxBase{bin: bin, plan: plan, req: req, secrets: envSecrets(req)}
	if d.Backend == BackendIsolationSession {
		return p.provisionSession(ctx, base, opts)
	}
	sb := &oneShot{sandboxBase: base, id: cmp.Or(opts.ID, newLocalID())}
	if privateTemp(plan.Policy) {
		// A folder of the sandbox's own for TEMP and TMP: the caller's
		// temp folder is not granted, and a shared one would let runs
		// read and plant each other's files. Made by the caller (so its
		// ACL is the caller's temp folder's), removed at Deprovision.
		tmp, err := os.MkdirTemp("", "corral-"+sb.id+"-")
		if err != nil {
			return nil, provider.Wrap(provider.CodeProvisionFailed, "the sandbox's temp folder", err)
		}
		sb.temp = tmp
		if req.Filesystem == nil {
			req.Filesystem = &Filesystem{}
		}
		req.Filesystem.ReadwritePaths = append(req.Filesystem.ReadwritePaths, tmp)
		req.Process.Env = provider.WithEnv(req.Process.Env, []string{"TEMP=" + tmp, "TMP=" + tmp})
	}
	if req.RuntimeConfig != nil && req.RuntimeConfig.NetworkProxy != "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, provider.Wrap(provider.CodeProvisionFailed, "egress proxy listener on 127.0.0.1", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		var cb [16]byte
		_, _ = rand.Read(cb[:])
		sb.listener, sb.cred = l, hex.EncodeToString(cb[:])
		req.RuntimeConfig.NetworkProxy = "http://127.0.0.1:" + strconv.Itoa(port)
		if req.Process == nil {
			req.Process = &Process{}
		}
		req.Process.Env = provider.WithEnv(req.Process.Env, provider.ProxyEnvAuth(port, "corral", sb.cred)) // user "corral", as egress.Config.Credential expects
		sb.secrets = append(envSecrets(req), sb.cred)
	}
	if opts.Persistent {
		c, err := p.provisionContainer(ctx, sb, opts)
		if err != nil {
			_ = sb.Deprovision(ctx)
			return nil, err
		}
		return c, nil
	}
	return sb, nil
}

// sandboxBase is what both backends share.
type sandboxBase struct {
	bin     string
	plan    *provider.Plan
	req     *Request // the plan's document, with the run-time values
	secrets []string // redacted from stderr and every message

	mu      sync.Mutex
	running *os.Process // the wxc-exec of a running Exec
}

// Layers reports the plan's layers: MXC gives no evidence from outside.
func (s *sandboxBase) Layers() []provider.LayerStatus { return s.plan.Layers }

// Signal forwards sig to the wxc-exec of the running Exec (on Windows only
// os.Kill can be delivered).
func (s *sandboxBase) Signal(sig os.Signal) error {
	s.mu.Lock()
	proc := s.running
	s.mu.Unlock()
	if proc == nil {
		return nil
	}
	return proc.Signal(sig)
}

func (s *sandboxBase) redact(text string) string { return Redact(text, s.secrets) }

// execRequest is the document of one Exec: the plan's process section
// (environment, timeout) with, if given, the working directory. The command
// itself goes as wxc-exec's trailing "-- CMD ..." (the contract: it
// overrides process.commandLine), so each argument reaches wxc-exec as
// one argv entry and wxc-exec, which knows how it launches the workload,
// composes the command line; Corral never quotes for a shell it does not
// see (process.commandLine may be run as a script).
func (s *sandboxBase) execRequest(req *Request, spec provider.ExecSpec) (*Request, error) {
	if spec.TTY {
		return nil, provider.Errorf(provider.CodeExecFailed, "mxc: wxc-exec offers no pseudo-terminal (no attach); run without a TTY")
	}
	if len(spec.ExtraFiles) > 0 {
		return nil, provider.Errorf(provider.CodeExecFailed, "mxc: wxc-exec cannot pass extra file descriptors to the workload")
	}
	if len(spec.Args) == 0 || spec.Args[0] == "" {
		return nil, provider.Errorf(provider.CodeExecFailed, "no command")
	}
	out := cloneRequest(req)
	if out.Process == nil {
		out.Process = &Process{}
	}
	out.Process.CommandLine = ""
	if spec.Dir != "" {
		out.Process.Cwd = spec.Dir
	}
	return out, nil
}

// execArgs is wxc-exec's argument list for one run of spec.Args.
func execArgs(flags []string, b64 string, spec provider.ExecSpec) []string {
	args := append(append([]string(nil), flags...), "--config-base64", b64, "--")
	return append(args, spec.Args...)
}

// envelope is wxc-exec's error envelope (state-aware phases on stdout,
// one-shot infrastructure failures on stderr).
type envelope struct {
	Error *struct {
		Code          string          `json:"code"`
		Message       string          `json:"message"`
		Details       json.RawMessage `json:"details,omitempty"`
		Operation     string          `json:"operation,omitempty"`
		NativeCode    json.RawMessage `json:"nativeCode,omitempty"`
		Remediation   string          `json:"remediation,omitempty"`
		ExtendedError json.RawMessage `json:"extended_error,omitempty"`
	} `json:"error"`
	Result json.RawMessage `json:"result"`
}

// parseEnvelope parses b as exactly one JSON document with an error
// carrying a code, or a result.
func parseEnvelope(b []byte) (*envelope, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var e envelope
	if err := dec.Decode(&e); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // more than one document
	}
	if e.Error != nil && e.Error.Code != "" {
		return &e, true
	}
	if e.Error == nil && len(e.Result) > 0 && !bytes.Equal(e.Result, []byte("null")) {
		return &e, true
	}
	return nil, false
}

// failedCode is the taxonomy code of a phase's own failure.
func failedCode(ph Phase) provider.Code {
	switch ph {
	case PhaseProvision:
		return provider.CodeProvisionFailed
	case PhaseStart:
		return provider.CodeStartFailed
	case PhaseStop, PhaseDeprovision:
		return provider.CodeStopFailed
	}
	return provider.CodeExecFailed
}

// envelopeCode maps the closed set of wxc-exec error codes onto the
// failure taxonomy.
func envelopeCode(code string, ph Phase) provider.Code {
	switch code {
	case "stale_id", "not_provisioned", "not_started", "already_started", "already_stopped":
		return provider.CodeStale
	case "malformed_id":
		return provider.CodeInternal // Corral only sends ids wxc-exec gave it
	case "backend_unavailable":
		return provider.CodeUnavailable
	case "policy_validation", "malformed_request", "unsupported_containment", "unsupported_phase":
		return provider.CodePolicyRejected
	case "backend_error":
		return failedCode(ph)
	}
	return provider.CodeInternal // outside the closed set
}

// envelopeError turns an error envelope into a provider error, redacted.
func (s *sandboxBase) envelopeError(e *envelope, ph Phase) *provider.Error {
	msg := e.Error.Message
	if e.Error.Remediation != "" {
		msg += " (remediation: " + e.Error.Remediation + ")"
	}
	label := string(ph)
	if label == "" {
		label = "run"
	}
	return provider.Errorf(envelopeCode(e.Error.Code, ph), "wxc-exec %s: %s: %s", label, e.Error.Code, s.redact(msg))
}

// exitOf reads how a process ended.
func exitOf(ps *os.ProcessState) (code int, sig string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal().String()
	}
	return ps.ExitCode(), ""
}

// timedOut reports the contract's timeout: exit -1 (255 on POSIX) and a
// message naming the timeout, for a document that set one.
func timedOut(req *Request, code int, stderr string, ran time.Duration) bool {
	if req.Process == nil || req.Process.Timeout == nil {
		return false
	}
	// A workload's own exit 255 with "timed out" on stderr (ssh does
	// that) is not the policy's timeout unless the run lasted that long.
	if ran < time.Duration(*req.Process.Timeout)*time.Millisecond {
		return false
	}
	if code != 255 && code != -1 && uint32(code) != 0xFFFFFFFF {
		return false
	}
	return strings.Contains(strings.ToLower(stderr), "timeout") || strings.Contains(strings.ToLower(stderr), "timed out")
}

// configFile replaces "--config-base64 B64" in args by "--config PATH", a
// mode-0600 file in a private temporary directory: the document carries
// environment values and the proxy credential, and a command line is
// readable by every local user (ps). cleanup removes the file.
func configFile(args []string) ([]string, func(), error) {
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "--config-base64" {
			continue
		}
		doc, err := base64.StdEncoding.DecodeString(args[i+1])
		if err != nil {
			return nil, nil, fmt.Errorf("config: %w", err)
		}
		dir, err := os.MkdirTemp("", "corral-mxc-") // 0700
		if err != nil {
			return nil, nil, err
		}
		path := filepath.Join(dir, "config.json")
		// The directory is private before the file is made in it (on
		// Windows MkdirTemp's folder has its parent's ACL).
		if err := makePrivate(dir); err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		out := append(append(append([]string(nil), args[:i]...), "--config", path), args[i+2:]...)
		return out, func() { os.RemoveAll(dir) }, nil
	}
	return args, func() {}, nil
}

// invocation is one wxc-exec run.
type invocation struct {
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// run starts wxc-exec and waits, registering it for Signal while it runs.
// killed says ending ctx killed it: its exit status is then the kill's
// (SIGKILL; exit 1 on Windows, where TerminateProcess sets the code).
func (s *sandboxBase) run(ctx context.Context, inv invocation, started func(int)) (ps *os.ProcessState, killed bool, err error) {
	args, cleanup, err := configFile(inv.args)
	if err != nil {
		return nil, false, err
	}
	defer cleanup()
	// wxc-exec and its workload do not outlive a killed corral
	// (startTied): a parent-death signal on Linux fires when the forking
	// thread exits, so the thread stays locked until Wait returns.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inv.stdin, inv.stdout, inv.stderr
	cmd.WaitDelay = 5 * time.Second // a workload's child holding a pipe must not hang us
	var cancelled atomic.Bool
	cmd.Cancel = func() error {
		err := cmd.Process.Kill()
		if err == nil { // not os.ErrProcessDone: it had not exited on its own
			cancelled.Store(true)
		}
		return err
	}
	release, err := startTied(cmd, s.req != nil && s.req.Containment == containmentIsolationSession)
	if err != nil {
		return nil, false, err
	}
	defer release()
	s.mu.Lock()
	s.running = cmd.Process
	s.mu.Unlock()
	if started != nil {
		started(cmd.Process.Pid)
	}
	err = cmd.Wait()
	s.mu.Lock()
	s.running = nil
	s.mu.Unlock()
	if cmd.ProcessState == nil {
		return nil, false, err
	}
	return cmd.ProcessState, cancelled.Load(), nil
}

func configArg(req *Request) (string, error) {
	b, err := req.JSON()
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// ---- process_container: one-shot ----

type oneShot struct {
	*sandboxBase
	id       string
	listener net.Listener
	cred     string
	temp     string // the private TEMP/TMP folder, or ""
	done     bool
}

// privateTemp reports whether a process_container run of r gets a private
// TEMP/TMP folder: a Windows policy that sets neither variable itself.
func privateTemp(r *policy.Resolved) bool {
	if r == nil || r.Policy == nil || r.Policy.OS() != policy.OSWindows || r.Lexical != "" {
		return false
	}
	for k := range r.Policy.Process.Env.Set {
		if strings.EqualFold(k, "TEMP") || strings.EqualFold(k, "TMP") {
			return false
		}
	}
	return true
}

func (s *oneShot) ID() string { return s.id }

// EgressListener is, for network proxy, the host loopback listener
// (127.0.0.1:<ephemeral>) the caller must serve with the egress proxy; the
// sandbox reaches nothing else. Valid from Provision on.
func (s *oneShot) EgressListener() net.Listener {
	if s.listener == nil {
		return nil
	}
	return s.listener
}

// ProxyCredential is the per-sandbox proxy password the workload's *_PROXY
// variables carry (user "corral"): configure the egress proxy with it
// (egress.Config.Credential), since the listener on host loopback is
// reachable by other host processes too. Empty without network proxy.
func (s *oneShot) ProxyCredential() string { return s.cred }

// Start does nothing: each Exec is a whole one-shot run.
func (s *oneShot) Start(ctx context.Context) error { return nil }

// Exec runs one one-shot wxc-exec. The workload's stdin and stdout are the
// spec's files, untouched. Its stderr is filtered on the way to
// spec.Stderr: a line that is wxc-exec's error envelope is withheld and
// becomes the returned error, and injected values are redacted. The exit
// code is the workload's.
//
// wxc-exec reports a request error as exit 1 with diagnostics, which no
// exit code of a workload can be told from; so the document is first
// checked with --dry-run, and any exit of the real run without an
// envelope is the workload's. Ending ctx kills wxc-exec
// (provider.CancelledStatus).
func (s *oneShot) Exec(ctx context.Context, spec provider.ExecSpec) (provider.ExitStatus, error) {
	req, err := s.execRequest(s.req, spec)
	if err != nil {
		return provider.ExitStatus{}, err
	}
	b64, err := configArg(req)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeInternal, "encoding the request", err)
	}
	if killed, err := s.dryRun(ctx, b64, spec); killed {
		return provider.CancelledStatus(0, ctx.Err())
	} else if err != nil {
		return provider.ExitStatus{}, err
	}
	f := newStderrFilter(spec.Stderr, s.secrets)
	t0 := time.Now()
	ps, killed, err := s.run(ctx, invocation{args: execArgs(nil, b64, spec), stdin: fileReader(spec.Stdin), stdout: fileWriter(spec.Stdout), stderr: f}, spec.Started)
	_ = f.Close()
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "running wxc-exec", err)
	}
	st := provider.ExitStatus{Duration: time.Since(t0)}
	st.Code, st.Signal = exitOf(ps)
	if killed {
		return provider.CancelledStatus(st.Duration, ctx.Err())
	}
	if st.Code != 0 && f.env != nil {
		return st, s.envelopeError(f.env, "")
	}
	if timedOut(req, st.Code, f.tail.String(), st.Duration) {
		st.TimedOut, st.Code = true, provider.CodeTimeout.ExitCode()
		st.Reason = "the policy timeout expired: " + s.redact(lastLine(f.tail.String()))
	}
	return st, nil
}

// dryRun has wxc-exec validate a one-shot request (--dry-run) without
// running anything: its error envelope, or its diagnostics, as the error.
// killed: ending ctx killed it.
func (s *sandboxBase) dryRun(ctx context.Context, b64 string, spec provider.ExecSpec) (killed bool, err error) {
	var dout, derr bytes.Buffer
	ps, killed, err := s.run(ctx, invocation{args: execArgs([]string{"--dry-run"}, b64, spec), stdout: &dout, stderr: &derr}, nil)
	if err != nil {
		return false, provider.Wrap(provider.CodeExecFailed, "running wxc-exec", err)
	}
	if ps.ExitCode() == 0 {
		return false, nil
	}
	if killed {
		return true, ctx.Err()
	}
	for _, text := range [][]byte{derr.Bytes(), dout.Bytes()} {
		if e := findEnvelope(text); e != nil {
			return false, s.envelopeError(e, "")
		}
	}
	return false, provider.Errorf(provider.CodeInternal, "wxc-exec rejected Corral's request (exit %d): %s", ps.ExitCode(), s.redact(strings.TrimSpace(derr.String())))
}

// Stop kills a running Exec's wxc-exec; idempotent.
func (s *oneShot) Stop(ctx context.Context) error {
	s.mu.Lock()
	proc := s.running
	s.mu.Unlock()
	if proc != nil {
		_ = proc.Kill()
	}
	return nil
}

// Deprovision closes the egress listener and removes the private temp
// folder (os.RemoveAll removes links and junctions the workload made
// there, not their targets); idempotent.
func (s *oneShot) Deprovision(ctx context.Context) error {
	if s.done {
		return nil
	}
	if s.listener != nil {
		s.listener.Close() // again on a retry: harmless
	}
	if s.temp != "" {
		if err := rmtree.RemoveAll(s.temp); err != nil {
			return provider.Wrap(provider.CodeInternal, "removing the sandbox's temp folder", err) // a later Deprovision tries again
		}
		s.temp = ""
	}
	s.done = true
	return nil
}

// fileReader and fileWriter keep a nil *os.File from becoming a non-nil
// interface (exec would then dereference it).
func fileReader(f *os.File) io.Reader {
	if f == nil {
		return nil
	}
	return f
}

func fileWriter(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// findEnvelope returns the last line of text that is an error envelope,
// or text as a whole when it is one.
func findEnvelope(text []byte) *envelope {
	if e, ok := parseEnvelope(text); ok && e.Error != nil {
		return e
	}
	lines := bytes.Split(text, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if e, ok := parseEnvelope(lines[i]); ok && e.Error != nil {
			return e
		}
	}
	return nil
}

// stderrFilter passes wxc-exec's stderr to w line by line, redacted, and
// withholds a line that is an error envelope (kept in env). A line that
// does not start with '{' is forwarded as it comes (no waiting for its
// end); a line that does is held until its newline (or 64 KiB) to be
// classified. tail keeps the last 8 KiB forwarded, unredacted, for
// classifying a timeout (messages built from it are redacted).
type stderrFilter struct {
	out     *redactWriter
	pending []byte
	midline bool
	env     *envelope
	tail    tailBuffer
}

func newStderrFilter(w *os.File, secrets []string) *stderrFilter {
	var dst io.Writer = io.Discard
	if w != nil {
		dst = w
	}
	return &stderrFilter{out: newRedactWriter(dst, secrets)}
}

const maxHeldLine = 64 << 10

func (f *stderrFilter) Write(p []byte) (int, error) {
	f.pending = append(f.pending, p...)
	for {
		i := bytes.IndexByte(f.pending, '\n')
		if i < 0 {
			break
		}
		line := f.pending[:i+1]
		if err := f.line(line); err != nil {
			return 0, err
		}
		f.pending = f.pending[i+1:]
		f.midline = false
	}
	if len(f.pending) > 0 && (f.midline || !startsJSON(f.pending) || len(f.pending) > maxHeldLine) {
		if err := f.forward(f.pending); err != nil {
			return 0, err
		}
		f.pending, f.midline = f.pending[:0], true
	}
	return len(p), nil
}

func startsJSON(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r")
	return len(t) == 0 || t[0] == '{'
}

func (f *stderrFilter) line(line []byte) error {
	if !f.midline {
		if e, ok := parseEnvelope(line); ok && e.Error != nil {
			f.env = e
			return nil
		}
	}
	return f.forward(line)
}

func (f *stderrFilter) forward(b []byte) error {
	f.tail.Write(b)
	_, err := f.out.Write(b)
	return err
}

// Close classifies and forwards what is held, then flushes the redactor.
func (f *stderrFilter) Close() error {
	if len(f.pending) > 0 {
		if err := f.line(f.pending); err != nil {
			return err
		}
		f.pending = nil
	}
	return f.out.Flush()
}

// tailBuffer keeps the last 8 KiB written.
type tailBuffer struct{ b []byte }

const tailMax = 8 << 10

func (t *tailBuffer) Write(p []byte) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
}

func (t *tailBuffer) String() string { return string(t.b) }

// ---- isolation_session: state-aware ----

type session struct {
	*sandboxBase
	id  string // the local id, rec.LocalID (immutable)
	st  store
	rec *Record // guarded by mu; changed only under the lifecycle lock
	// recovered sandboxes have no plan: Exec needs the policy's process
	// section (environment, timeout), which the record deliberately does
	// not keep. Reattach with the plan to exec again.
	noPlan bool
}

func (s *session) ID() string { return s.id }

// EgressListener is nil: isolation_session cannot filter the network.
func (s *session) EgressListener() net.Listener { return nil }

// Record returns a copy of the sandbox's durable record.
func (s *session) Record() Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.rec
}

// save writes the record as it is now.
func (s *session) save() error {
	rec := s.Record()
	err := s.st.write(&rec)
	s.mu.Lock()
	s.rec.Created, s.rec.Updated = rec.Created, rec.Updated
	s.mu.Unlock()
	return err
}

func (p *Provider) store() store { return store{dir: p.stateDir} }

func (p *Provider) provisionSession(ctx context.Context, base *sandboxBase, opts provider.ProvisionOptions) (provider.Sandbox, error) {
	st := p.store()
	id := cmp.Or(opts.ID, newLocalID())
	preq, err := base.req.ForPhase(PhaseProvision, "")
	if err != nil {
		return nil, provider.Wrap(provider.CodeInternal, "", err)
	}
	lk, err := st.lock(ctx, id)
	if err != nil {
		return nil, &provider.Error{Code: provider.CodeProvisionFailed, Msg: "state directory", Err: err}
	}
	defer lk.unlock()
	// A caller's id may be reused (a gateway sandbox started again) only
	// once nothing stands for its last session: provision is never
	// repeated over a record that may still name one.
	if old, err := st.read(id); err == nil && standsForSession(old.PhaseState) {
		return nil, provider.Errorf(provider.CodeStale, "mxc: sandbox %s already has a record in state %s (%s): destroy it first", id, old.PhaseState, st.path(id))
	} else if err != nil && provider.CodeOf(err) != provider.CodeNotFound {
		return nil, err
	}
	rec := &Record{LocalID: id, Backend: BackendIsolationSession, PhaseState: StateProvisioning, Owner: opts.Owner}
	if base.plan.Policy != nil {
		rec.PolicyHash = base.plan.Policy.Hash
	}
	// Durable before anything is created.
	if err := st.write(rec); err != nil {
		return nil, &provider.Error{Code: provider.CodeProvisionFailed, Msg: "writing the sandbox record before provision", Err: err}
	}
	s := &session{sandboxBase: base, id: id, st: st, rec: rec}
	res, perr := s.phase(ctx, PhaseProvision, preq)
	if perr != nil {
		if perr.enveloped {
			rec.PhaseState = StateFailed
		} // else: no envelope, the executor died: a session may exist
		rec.LastError = perr.err.Error()
		if werr := st.write(rec); werr != nil {
			return nil, &provider.Error{Code: perr.err.Code, Msg: perr.err.Msg + "; and the record could not be updated: " + werr.Error()}
		}
		if !perr.enveloped {
			// Say where the orphan is: an agent user may exist that
			// nothing names.
			return nil, &provider.Error{Code: perr.err.Code, Msg: perr.err.Msg + fmt.Sprintf("; a session may have been provisioned without an id: record %s left as an orphan (check the host's MXC agent users, then remove the record)", st.path(id))}
		}
		return nil, perr.err
	}
	var out struct {
		SandboxID string          `json:"sandboxId"`
		Metadata  json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(res, &out); err != nil || out.SandboxID == "" {
		// Something was provisioned, but nothing names it: an orphan.
		rec.LastError = fmt.Sprintf("provision answered without a sandboxId: %s", s.redact(string(res)))
		_ = st.write(rec)
		return nil, provider.Errorf(provider.CodeProvisionFailed, "%s (record %s left as an orphan)", rec.LastError, id)
	}
	rec.SandboxID, rec.Metadata, rec.PhaseState, rec.LastError = out.SandboxID, out.Metadata, StateProvisioned, ""
	if err := st.write(rec); err != nil {
		// Never leave an unnamed agent user behind: undo it now.
		msg := fmt.Sprintf("provisioned %s but could not persist its id: %v", out.SandboxID, err)
		if dreq, derr := base.req.ForPhase(PhaseDeprovision, out.SandboxID); derr == nil {
			if _, e := s.phase(context.WithoutCancel(ctx), PhaseDeprovision, dreq); e != nil {
				msg += "; deprovisioning it failed too: " + e.err.Error()
			} else {
				msg += "; it was deprovisioned"
			}
		}
		return nil, provider.Errorf(provider.CodeProvisionFailed, "%s", msg)
	}
	return s, nil
}

// phaseError is a phase failure and whether wxc-exec answered it with an
// envelope (a definite answer) or died without one.
type phaseError struct {
	err       *provider.Error
	enveloped bool
	envCode   string
}

// phase runs one non-exec phase and returns the envelope's result.
func (s *sandboxBase) phase(ctx context.Context, ph Phase, req *Request) (json.RawMessage, *phaseError) {
	b64, err := configArg(req)
	if err != nil {
		return nil, &phaseError{err: provider.Wrap(provider.CodeInternal, "encoding the "+string(ph)+" request", err)}
	}
	var stdout, stderr bytes.Buffer
	ps, _, err := s.run(ctx, invocation{args: []string{"--experimental", "--config-base64", b64}, stdout: &stdout, stderr: &stderr}, nil)
	if err != nil {
		return nil, &phaseError{err: provider.Wrap(failedCode(ph), "running wxc-exec "+string(ph), err)}
	}
	e, ok := parseEnvelope(stdout.Bytes())
	switch {
	case ok && e.Error != nil:
		return nil, &phaseError{err: s.envelopeError(e, ph), enveloped: true, envCode: e.Error.Code}
	case ok && ps.ExitCode() == 0:
		return e.Result, nil
	}
	code, sig := exitOf(ps)
	how := "exited " + strconv.Itoa(code)
	if sig != "" {
		how = "was killed by " + sig
	}
	diag := strings.TrimSpace(stderr.String())
	if diag == "" {
		diag = strings.TrimSpace(stdout.String())
	}
	if len(diag) > 2048 {
		diag = "..." + diag[len(diag)-2048:]
	}
	return nil, &phaseError{err: provider.Errorf(failedCode(ph), "wxc-exec %s %s without an answer: %s", ph, how, s.redact(diag))}
}

// transition runs phase ph under the lifecycle lock, refusing when the
// record is in none of the states from, and moves the record to to on
// success. during, if set, is written before the phase runs.
func (s *session) transition(ctx context.Context, ph Phase, from []State, during, to State) error {
	lk, err := s.st.lock(ctx, s.id)
	if err != nil {
		return err
	}
	defer lk.unlock()
	if err := s.reload(); err != nil {
		return err
	}
	cur := s.Record()
	if !stateIn(cur.PhaseState, from) {
		return provider.Errorf(provider.CodeStale, "sandbox %s is %s: cannot %s", s.id, cur.PhaseState, ph)
	}
	req, err := s.req.ForPhase(ph, cur.SandboxID)
	if err != nil {
		return provider.Wrap(provider.CodeInternal, "", err)
	}
	if during != "" {
		s.setState(during, "")
		if err := s.save(); err != nil {
			return &provider.Error{Code: failedCode(ph), Msg: "writing the sandbox record", Err: err}
		}
	}
	if _, perr := s.phase(ctx, ph, req); perr != nil {
		return s.fail(perr)
	}
	s.setState(to, "")
	if err := s.save(); err != nil {
		return &provider.Error{Code: failedCode(ph), Msg: fmt.Sprintf("%s succeeded but the record could not be updated", ph), Err: err}
	}
	return nil
}

// fail records a phase failure: stale_id marks the record stale.
func (s *session) fail(perr *phaseError) error {
	st := s.Record().PhaseState
	if perr.envCode == "stale_id" {
		st = StateStale
	}
	s.setState(st, perr.err.Error())
	_ = s.save()
	return perr.err
}

func (s *session) setState(st State, lastErr string) {
	s.mu.Lock()
	s.rec.PhaseState, s.rec.LastError = st, lastErr
	s.mu.Unlock()
}

// reload rereads the record: another process may have moved it.
func (s *session) reload() error {
	rec, err := s.st.read(s.id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.rec = rec
	s.mu.Unlock()
	return nil
}

func stateIn(st State, set []State) bool {
	for _, x := range set {
		if st == x {
			return true
		}
	}
	return false
}

// Start runs the start phase (provisioned → started). MXC cannot restart a
// stopped session in place.
func (s *session) Start(ctx context.Context) error {
	return s.transition(ctx, PhaseStart, []State{StateProvisioned}, "", StateStarted)
}

// Stop runs the stop phase when the session was started; idempotent (a
// session never started, or already stopped or gone, is left alone — wxc-exec
// would answer a repeated stop with backend_error).
func (s *session) Stop(ctx context.Context) error {
	lk, err := s.st.lock(ctx, s.id)
	if err != nil {
		return err
	}
	started := s.reload() == nil && s.Record().PhaseState == StateStarted
	lk.unlock()
	if !started {
		return nil
	}
	err = s.transition(ctx, PhaseStop, []State{StateStarted}, "", StateStopped)
	if provider.CodeOf(err) == provider.CodeStale && s.Record().PhaseState == StateStopped {
		return nil // stopped by someone else meanwhile
	}
	return err
}

// Deprovision removes the agent user and its session; idempotent on a
// record already deprovisioned. The record goes through deprovisioning (so
// an interrupted deprovision can be resumed by Recover) to deprovisioned;
// stale_id (the session is already gone) marks it stale and returns
// CodeStale.
func (s *session) Deprovision(ctx context.Context) error {
	err := s.transition(ctx, PhaseDeprovision, []State{StateProvisioned, StateStarted, StateStopped, StateDeprovisioning}, StateDeprovisioning, StateDeprovisioned)
	switch provider.CodeOf(err) {
	case provider.CodeStale:
		if s.Record().PhaseState == StateDeprovisioned {
			return nil
		}
	case provider.CodeNotFound:
		return nil // the record is gone: Destroy removed it
	}
	return err
}

// Exec runs the exec phase. wxc-exec's stdout is captured whole: when wxc-exec
// exits 1 and all of it parses as one error envelope it is a dispatch
// failure (returned as an error, redacted); otherwise it is the workload's
// output and is copied, unchanged, to spec.Stdout after the run (so the
// output arrives at the end, and is held in memory). stderr streams through
// the redacting filter. The exit code is the workload's. Ending ctx kills
// wxc-exec (provider.CancelledStatus).
func (s *session) Exec(ctx context.Context, spec provider.ExecSpec) (provider.ExitStatus, error) {
	if s.noPlan {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeStale, "sandbox %s was recovered without its plan: the policy's process section (environment, timeout) is not kept in the record; reattach with Provider.Reattach", s.id)
	}
	lk, err := s.st.lock(ctx, s.id)
	if err != nil {
		return provider.ExitStatus{}, err
	}
	defer lk.unlock()
	if err := s.reload(); err != nil {
		return provider.ExitStatus{}, err
	}
	cur := s.Record()
	if cur.PhaseState != StateStarted {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeStale, "sandbox %s is %s: cannot exec", s.id, cur.PhaseState)
	}
	base, err := s.req.ForPhase(PhaseExec, cur.SandboxID)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeInternal, "", err)
	}
	req, err := s.execRequest(base, spec)
	if err != nil {
		return provider.ExitStatus{}, err
	}
	b64, err := configArg(req)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeInternal, "encoding the exec request", err)
	}
	var stdout bytes.Buffer
	f := newStderrFilter(spec.Stderr, s.secrets)
	t0 := time.Now()
	ps, killed, err := s.run(ctx, invocation{args: execArgs([]string{"--experimental"}, b64, spec), stdin: fileReader(spec.Stdin), stdout: &stdout, stderr: f}, spec.Started)
	_ = f.Close()
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "running wxc-exec exec", err)
	}
	st := provider.ExitStatus{Duration: time.Since(t0)}
	st.Code, st.Signal = exitOf(ps)
	if st.Code == 1 {
		if e, ok := parseEnvelope(stdout.Bytes()); ok && e.Error != nil {
			perr := &phaseError{err: s.envelopeError(e, PhaseExec), enveloped: true, envCode: e.Error.Code}
			if perr.envCode == "stale_id" {
				return provider.ExitStatus{}, s.fail(perr)
			}
			return provider.ExitStatus{}, perr.err
		}
	}
	if spec.Stdout != nil {
		if _, err := spec.Stdout.Write(stdout.Bytes()); err != nil {
			return st, provider.Wrap(provider.CodeExecFailed, "copying the workload's output", err)
		}
	}
	if killed {
		return provider.CancelledStatus(st.Duration, ctx.Err())
	}
	if timedOut(req, st.Code, f.tail.String(), st.Duration) {
		st.TimedOut, st.Code = true, provider.CodeTimeout.ExitCode()
		st.Reason = "the policy timeout expired: " + s.redact(lastLine(f.tail.String()))
	}
	return st, nil
}

// sessionState is an isolation_session sandbox's State: its local id.
type sessionState struct {
	ID string `json:"id"`
}

// SessionState is the Recover state of the isolation_session sandbox with
// local id id (what its State returns).
func SessionState(id string) []byte {
	b, _ := json.Marshal(sessionState{ID: id})
	return b
}

// State is what Recover takes to reattach to the sandbox.
func (s *session) State() []byte { return SessionState(s.id) }

// Running reports whether the sandbox's record, read again, says started:
// MXC has no call that lists or inspects sessions, so the record is what
// Corral checks here (cheaply: Get and List ask it of every sandbox). A
// session found gone (stale_id, at an exec or at Recover's check) has
// moved the record to stale.
func (s *session) Running(ctx context.Context) bool {
	return s.reload() == nil && s.Record().PhaseState == StateStarted
}

// Recover reattaches to an isolation_session sandbox from its record. With
// plan (the plan of the same policy: the hashes are compared, CodeStale
// when they differ) Exec works again; without, the sandbox can Start, Stop
// and Deprovision, as the record deliberately does not keep the policy's
// process section. A record left provisioning by a provisioner that is
// gone is an orphan: it is marked orphaned and reported with CodeStale (an
// agent user may exist that no sandboxId names: see Orphans).
// Deprovisioned, failed or stale records give CodeNotFound, and so does
// a started session MXC answers stale_id for (checkStarted).
func (p *Provider) Recover(ctx context.Context, plan *provider.Plan, state []byte) (provider.Sandbox, error) {
	var ss sessionState
	if err := json.Unmarshal(state, &ss); err != nil {
		return nil, provider.Wrap(provider.CodeInternal, "mxc: recover state (not the state this provider gave: nothing is known of the sandbox)", err)
	}
	return p.reattach(ctx, ss.ID, plan)
}

func (p *Provider) reattach(ctx context.Context, id string, plan *provider.Plan) (provider.Sandbox, error) {
	st := p.store()
	rec, err := st.read(id)
	if err != nil {
		return nil, err
	}
	switch rec.Backend {
	case BackendProcessContainer:
		return nil, provider.Errorf(provider.CodeNotFound, "sandbox %s (process_container) ended with the control plane that made it: MXC has no attach", id)
	case BackendIsolationSession:
	default:
		return nil, provider.Errorf(provider.CodeNotFound, "sandbox %s is not an isolation_session", id)
	}
	switch rec.PhaseState {
	case StateProvisioning, StateOrphaned:
		if st.heldByOther(id) {
			return nil, provider.Errorf(provider.CodeStale, "sandbox %s is being provisioned by another process", id)
		}
		if rec.PhaseState == StateProvisioning {
			lk, err := st.lock(ctx, id)
			if err != nil {
				return nil, err
			}
			cur, err := st.read(id)
			if err == nil && cur.PhaseState != StateProvisioning {
				// A provision of this process finished meanwhile.
				lk.unlock()
				return p.reattach(ctx, id, plan)
			}
			if err == nil {
				cur.PhaseState = StateOrphaned
				_ = st.write(cur)
			}
			lk.unlock()
		}
		return nil, provider.Errorf(provider.CodeStale, "sandbox %s is an orphan: its provision never returned a sandboxId, so an agent user may exist that Corral cannot name (%s); remove it by hand, then delete %s", id, rec.LastError, st.path(id))
	case StateDeprovisioned, StateFailed:
		return nil, provider.Errorf(provider.CodeNotFound, "sandbox %s is %s", id, rec.PhaseState)
	case StateStale: // MXC said so: gone
		return nil, provider.Errorf(provider.CodeNotFound, "sandbox %s no longer exists in MXC (stale_id)", id)
	}
	bin, err := p.wxcExec()
	if err != nil {
		return nil, &provider.Error{Code: provider.CodeUnavailable, Msg: installFix, Err: err}
	}
	if rec.PhaseState == StateStarted {
		if err := p.checkStarted(ctx, bin, st, rec); err != nil {
			return nil, err
		}
	}
	req := &Request{Version: wireVersion[p.cfg.SchemaVersion], Containment: containmentIsolationSession}
	s := &session{sandboxBase: &sandboxBase{}, id: id, st: st, rec: rec, noPlan: plan == nil}
	s.bin = bin
	if plan != nil {
		d, ok := plan.Details.(*Details)
		if !ok || d.Request == nil || d.Backend != BackendIsolationSession {
			return nil, provider.Errorf(provider.CodeInternal, "plan is not an mxc isolation_session plan")
		}
		if plan.Policy != nil && rec.PolicyHash != "" && plan.Policy.Hash != rec.PolicyHash {
			return nil, provider.Errorf(provider.CodeStale, "sandbox %s was provisioned for policy %s, not %s", id, rec.PolicyHash, plan.Policy.Hash)
		}
		req = cloneRequest(d.Request)
		s.plan = plan
	} else {
		s.plan = &provider.Plan{Provider: Name, Layers: layerStatus(BackendIsolationSession, nil)}
	}
	s.req, s.secrets = req, envSecrets(req)
	return s, nil
}

// checkStarted asks MXC whether the started session rec names still
// exists, the one way the contract allows (MXC has no inspect call): a
// repeated start, which a live session answers with an error
// (backend_error or already_started, "start repeated gives backend_error")
// and one that is gone with stale_id. Gone: the record becomes stale and
// the answer is CodeNotFound. No answer at all: CodeUnavailable (nothing is
// known; nothing may be destroyed on it). A start that succeeds found the
// session not started, and it is now: it stands.
func (p *Provider) checkStarted(ctx context.Context, bin string, st store, rec *Record) error {
	lk, err := st.lock(ctx, rec.LocalID)
	if err != nil {
		return err
	}
	defer lk.unlock()
	req := &Request{Version: wireVersion[p.cfg.SchemaVersion], Containment: containmentIsolationSession}
	sreq, err := req.ForPhase(PhaseStart, rec.SandboxID)
	if err != nil {
		return provider.Wrap(provider.CodeInternal, "", err)
	}
	base := &sandboxBase{bin: bin}
	_, perr := base.phase(ctx, PhaseStart, sreq)
	switch {
	case perr == nil, perr.enveloped && perr.envCode != "stale_id":
		return nil
	case perr.enveloped:
		cur, err := st.read(rec.LocalID)
		if err != nil {
			return err
		}
		cur.PhaseState, cur.LastError = StateStale, perr.err.Error()
		if err := st.write(cur); err != nil {
			return &provider.Error{Code: provider.CodeInternal, Msg: "writing the sandbox record", Err: err}
		}
		return provider.Errorf(provider.CodeNotFound, "sandbox %s: its session %s is gone (%s)", rec.LocalID, rec.SandboxID, perr.err.Msg)
	}
	return provider.Wrap(provider.CodeUnavailable, "sandbox "+rec.LocalID+": whether its session still exists is unknown", perr.err)
}

// Orphans lists the isolation_session records that name no session but
// may stand for one: left provisioning by a provisioner that is gone (the
// executor or Corral died between creating the agent user and the
// sandboxId being persisted), or already marked orphaned. Each needs a
// human: the agent user, if any, is not reachable through wxc-exec.
func (p *Provider) Orphans() ([]Record, error) {
	st := p.store()
	recs, err := st.list()
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, r := range recs {
		switch r.PhaseState {
		case StateOrphaned:
			out = append(out, *r)
		case StateProvisioning:
			if !st.heldByOther(r.LocalID) {
				out = append(out, *r)
			}
		}
	}
	return out, nil
}

// Records lists every record in the state directory (for doctor and
// tests).
func (p *Provider) Records() ([]Record, error) {
	recs, err := p.store().list()
	if err != nil {
		return nil, err
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = *r
	}
	return out, nil
}
