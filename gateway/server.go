//go:build linux || windows

// Package gateway is Corral's control plane: a Connect/gRPC API
// (gateway/proto) over managed, long-lived sandboxes whose state is kept
// in the store. Every intent is stored before it is acted on, a
// per-sandbox gate serialises create, exec, stop and delete, and on start
// the gateway reconciles its records with what the provider runs (see
// Reconcile), so a gateway killed at any moment comes back consistent.
//
// Sandboxes are the persistent sandboxes of its providers (each a
// provider.Manager: docker, linux, mxc's isolation_session): they outlive
// the gateway and are adopted when it restarts.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/consent"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/session"
	"github.com/corral-sandbox/corral/store"
)

// InstancePrefix starts the value of io.corral.managed-by on a gateway's
// containers: "gateway/" and the instance id kept beside its database, so
// that two gateways on one daemon never take each other's for orphans.
const InstancePrefix = "gateway/"

// FaultEnv, for crash tests, names a point at which the gateway kills
// itself with SIGKILL: create-after-intent, create-after-provision,
// create-after-start, stop-after-intent, delete-after-intent,
// exec-started.
const FaultEnv = "CORRAL_GATEWAY_FAULT"

// Provider is a provider whose persistent sandboxes a gateway manages.
type Provider interface {
	provider.Provider
	provider.Manager
}

// Config is what a Server needs.
type Config struct {
	Store *store.Store
	// Providers make the sandboxes: persistent ones (ProvisionOptions),
	// which each lists and destroys by owner (provider.Manager). A
	// record names its provider. "auto" takes the first, in this order,
	// that can enforce a sandbox's policy.
	Providers []Provider
	// Default names the provider of a create that names none ("": the
	// first of Providers).
	Default string
	// Instance is this gateway's io.corral.managed-by value
	// (InstancePrefix + a random id stored with its database).
	Instance string
	// Home is the home directory policies resolve "~" against.
	Home string
	// LogDir holds each sandbox's output log (ID.log, 0600).
	LogDir string
	// Version is Corral's, for the audit events' metadata.
	Version string
	// MaxStarts bounds, per provider name, how many sandboxes start at
	// once (the rest wait their turn): a linux start is CPU-bound (about
	// 60 ms of CPU), so a hundred at once all finish late, where a queue
	// of NumCPU finishes half of them in half the time. Absent: no bound.
	MaxStarts map[string]int
}

// Server implements gatewayv1connect.SandboxServiceHandler.
type Server struct {
	cfg   Config
	mu    sync.Mutex
	gates map[string]*gate
	// live are the ready sandboxes this process holds, each with its
	// egress proxy and audit log (the session's).
	live map[string]*held
	// starts are the slots of Config.MaxStarts, by provider name.
	starts map[string]chan struct{}
	// hub is the consent brokers of live's sessions (putLive).
	hub *consent.Hub
}

// held is a live sandbox: its session, the session's sandbox as a
// provider.Persistent, and its audit log (ID.audit.jsonl in LogDir).
type held struct {
	sess *session.Session
	pers provider.Persistent
	log  *audit.Log
}

// hold makes the held of a session just opened or recovered; a sandbox
// that is not a provider.Persistent is refused (the caller releases it).
func hold(p Provider, sess *session.Session, log *audit.Log) (*held, error) {
	pers, ok := sess.Sandbox().(provider.Persistent)
	if !ok {
		return nil, provider.Errorf(provider.CodeInternal, "%s: a persistent sandbox that is not a provider.Persistent", p.Name())
	}
	return &held{sess: sess, pers: pers, log: log}, nil
}

// running reports whether the sandbox runs now, checked from outside.
func (h *held) running(ctx context.Context) bool { return h.pers.Running(ctx) }

// state is the provider state to store for the sandbox's Recover.
func (h *held) state() string { return string(h.pers.State()) }

// close releases the sandbox (stopped and removed) and its log.
func (h *held) close() {
	_ = h.sess.Close()
	_ = h.log.Close()
}

// New returns a server; call Reconcile before serving.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, gates: map[string]*gate{}, live: map[string]*held{}, starts: map[string]chan struct{}{}, hub: consent.NewHub()}
	for name, n := range cfg.MaxStarts {
		if n > 0 {
			s.starts[name] = make(chan struct{}, n)
		}
	}
	return s
}

// gate serialises what is done to one sandbox: lifecycle calls (create,
// stop, delete, policy set) hold it exclusively; execs share it, each with
// a context that a lifecycle call cancels first, so a hung or interactive
// command never holds off a stop.
type gate struct {
	rw    sync.RWMutex
	mu    sync.Mutex
	execs map[*context.CancelFunc]struct{}
	// creds serialises credential changes, which share rw as execs do
	// (a rotation ends no command).
	creds sync.Mutex
}

// gate returns the sandbox's gate.
func (s *Server) gate(id string) *gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gates[id]
	if !ok {
		g = &gate{execs: map[*context.CancelFunc]struct{}{}}
		s.gates[id] = g
	}
	return g
}

// Lock ends the sandbox's execs under way (and any that slip in
// meanwhile), then takes the gate.
func (g *gate) Lock() {
	for {
		g.mu.Lock()
		for c := range g.execs {
			(*c)()
		}
		g.mu.Unlock()
		if g.rw.TryLock() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *gate) Unlock() { g.rw.Unlock() }

// exec shares the gate for one command; the context ends when a lifecycle
// call wants the sandbox. The returned func releases both.
func (g *gate) exec(ctx context.Context) (context.Context, func()) {
	g.rw.RLock()
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	g.execs[&cancel] = struct{}{}
	g.mu.Unlock()
	return ctx, func() {
		g.mu.Lock()
		delete(g.execs, &cancel)
		g.mu.Unlock()
		cancel()
		g.rw.RUnlock()
	}
}

func fault(point string) {
	if os.Getenv(FaultEnv) == point {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Kill() // SIGKILL; TerminateProcess on Windows
		}
		time.Sleep(time.Second)
	}
}

// idOf is the id of the sandbox x names: x itself when it has an id's
// shape or names no sandbox (the call then finds no record).
func (s *Server) idOf(x string) string {
	if provider.IsID(x) {
		return x
	}
	if id, err := s.cfg.Store.IDByName(x); err == nil {
		return id
	}
	return x
}

// nameRule is RFC 1123's DNS label, lower case.
var nameRule = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })

// checkName refuses a sandbox name that is not a DNS label, or that has an
// id's shape (it would shadow, or be shadowed by, an id).
func checkName(name string) error {
	switch {
	case name == "":
		return nil
	case !nameRule().MatchString(name):
		return fmt.Errorf("name %q: want a DNS label: 1 to 63 of a-z, 0-9 and '-', starting and ending with a letter or digit", name)
	case provider.IsID(name):
		return fmt.Errorf("name %q has the shape of a sandbox id: choose another", name)
	}
	return nil
}

// lockRecord takes the sandbox's gate (exclusively) and reads its record;
// the caller defers the returned unlock. The error is a connect error.
func (s *Server) lockRecord(id string) (store.Sandbox, func(), error) {
	id = s.idOf(id)
	g := s.gate(id)
	g.Lock()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		g.Unlock()
		return rec, nil, storeErr(id, err)
	}
	return rec, g.Unlock, nil
}

// event records an event; a failure to record is not the caller's error.
func (s *Server) event(id, kind, format string, args ...any) {
	_ = s.cfg.Store.AddEvent(id, kind, fmt.Sprintf(format, args...))
}

// CreateSandbox provisions and starts a sandbox: the record (phase
// provisioning) is stored first, then the sandbox is made; the result is
// ready, or error with the reason (and nothing left running).
func (s *Server) CreateSandbox(ctx context.Context, req *connect.Request[gw.CreateSandboxRequest]) (*connect.Response[gw.CreateSandboxResponse], error) {
	m := req.Msg
	if err := checkName(m.Name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	p, res, plan, loss, err := s.choose(ctx, m)
	if err != nil {
		return nil, err
	}
	creds, err := credentialRows(res, m.Credentials, nil)
	if err != nil {
		return nil, err
	}
	name := p.Name()
	id := provider.NewID()
	lossJSON, _ := json.Marshal(loss)
	g := s.gate(id)
	g.Lock()
	defer g.Unlock()
	image := res.DockerImage()
	if name != "docker" {
		image = "" // a record's image is docker's (docker.image); others run the host's files
	}
	rec, err := s.cfg.Store.Insert(store.Sandbox{ID: id, Provider: name, Phase: store.PhaseProvisioning, Desired: "running",
		PolicyYAML: m.PolicyYaml, PolicyHash: res.Hash, Image: image, Workdir: res.Workdir, Losses: string(lossJSON), Name: m.Name}, creds...)
	if errors.Is(err, store.ErrNameTaken) {
		return nil, connect.NewError(connect.CodeAlreadyExists, err)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if image != "" {
		s.event(id, "created", "provisioning on %s with image %s", name, image)
	} else {
		s.event(id, "created", "provisioning on %s", name)
	}
	fault("create-after-intent")
	// The work goes on even if the caller goes away: the record says what
	// is under way, and the caller can Get it.
	h, err := s.bringUp(context.WithoutCancel(ctx), id, p, plan, creds)
	if err != nil {
		s.event(id, "error", "%v", err)
		rec, _ = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Reason = store.PhaseError, err.Error() })
		return nil, connect.NewError(connect.CodeUnknown, fmt.Errorf("sandbox %s: %w", id, err))
	}
	layers, _ := json.Marshal(h.sess.Layers())
	s.mu.Lock()
	s.putLive(id, h) // held, so that a failure below releases it all
	s.mu.Unlock()
	rec, err = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) {
		r.Phase, r.Reason, r.Layers, r.ProviderState = store.PhaseReady, "", string(layers), h.state()
	})
	if err != nil {
		_ = s.release(context.WithoutCancel(ctx), id, p) // the record stays provisioning: the next start marks it
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	s.event(id, "ready", "layers verified from outside")
	return connect.NewResponse(&gw.CreateSandboxResponse{Sandbox: toProto(rec)}), nil
}

// choose is the provider of a create and its mapping of the policy: the
// one named, the default, or with "auto" the first of the gateway's
// providers whose mapping has no error loss and uses the image the
// request or policy names (no loss on docker.image); each one's refusal
// is in the error when none fits.
func (s *Server) choose(ctx context.Context, m *gw.CreateSandboxRequest) (Provider, *policy.Resolved, *provider.Plan, provider.LossReport, error) {
	if m.Provider != "auto" {
		p, err := s.provider(m.Provider)
		if err != nil {
			return nil, nil, nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		res, plan, loss, err := s.mapPolicy(ctx, p, m.PolicyYaml, m.Image, m.Workdir, nil)
		return p, res, plan, loss, err
	}
	var refused []string
	for _, p := range s.cfg.Providers {
		res, plan, loss, err := s.mapPolicy(ctx, p, m.PolicyYaml, m.Image, m.Workdir, nil)
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			refused = append(refused, p.Name()+": "+err.Error())
			continue
		}
		if i := slices.IndexFunc(loss, func(l provider.Loss) bool { return l.Field == "docker.image" }); i >= 0 {
			refused = append(refused, p.Name()+": "+loss[i].Message)
			continue
		}
		return p, res, plan, loss, err
	}
	return nil, nil, nil, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("provider auto: no provider of this gateway can enforce the policy: %s", strings.Join(refused, "; ")))
}

// mapPolicy parses, resolves and maps a policy for a sandbox; image, when
// set, is the docker.image to use if the policy names none; keep are the
// credential placeholders the sandbox has (nil for a new one). Errors are
// connect errors: InvalidArgument for a bad policy, FailedPrecondition for
// one the provider cannot enforce (the loss report's errors).
func (s *Server) mapPolicy(ctx context.Context, p Provider, yaml, image, workdir string, keep map[string]string) (*policy.Resolved, *provider.Plan, provider.LossReport, error) {
	res, err := s.resolvePolicy(yaml, image, workdir, keep)
	if err != nil {
		return nil, nil, nil, err
	}
	// The sandbox's audit log is the gateway's: no grant may let the
	// workload rewrite it.
	if err := session.CheckLogOutside(s.auditPath(provider.NewID()), res, "the policy must not grant "+s.cfg.LogDir+" read-write"); err != nil {
		return nil, nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	plan, err := session.Plan(ctx, p, res)
	if err != nil {
		return nil, nil, nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return res, plan, plan.Loss, nil
}

// resolvePolicy parses and resolves a sandbox's policy (see mapPolicy).
func (s *Server) resolvePolicy(yaml, image, workdir string, keep map[string]string) (*policy.Resolved, error) {
	pol := policy.DefaultFor(policy.HostOS())
	if yaml != "" {
		var err error
		if pol, err = policy.Parse([]byte(yaml), "policy"); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	if image != "" && (pol.Docker == nil || pol.Docker.Image == "") {
		pol.Docker = &policy.Docker{Image: image}
		if err := pol.Validate(); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	res, err := pol.Resolve(policy.Context{Home: s.cfg.Home, Workdir: workdir, Environ: fixedEnviron(pol.OS()), Placeholders: keep})
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := checkSources(res); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return res, nil
}

// fixedEnviron is the environment every sandbox's policy passes from:
// the gateway's own, never a caller's. For a Linux policy PATH
// (policy.DefaultPATH) and LANG; for a Windows one the gateway's values
// of policy.DefaultEnvPassWindows, the machine facts cmd.exe and the C
// runtime need, but PATH (the policy's default, policy.DefaultPATHWindows,
// applies: the gateway's own PATH is its user's).
func fixedEnviron(target policy.OS) []string {
	if target != policy.OSWindows {
		return []string{"PATH=" + policy.DefaultPATH, "LANG=C.UTF-8"}
	}
	var env []string
	for _, name := range policy.DefaultEnvPassWindows {
		if v, ok := os.LookupEnv(name); ok && name != "PATH" {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// checkPlanted reports what an exec planted in the sandbox's writable
// trees since the last one (internal/planted) as events, audit findings
// and on the exec's stderr. A policy that no longer resolves (a planted
// link) is reported the same way: the next start refuses it.
func (s *Server) checkPlanted(h *held, rec *store.Sandbox, send func(*gw.ExecSandboxResponse) error) {
	var lines []string
	for _, f := range h.sess.CheckPlanted(io.Discard, false) {
		lines = append(lines, "planted for later: "+f.String())
	}
	if _, err := s.resolvePolicy(rec.PolicyYAML, rec.Image, rec.Workdir, nil); err != nil {
		lines = append(lines, "the sandbox's policy no longer resolves, so its next start will be refused: "+err.Error())
	}
	for _, l := range lines {
		s.event(rec.ID, "planted", "%s", l)
		_ = send(&gw.ExecSandboxResponse{Output: &gw.ExecSandboxResponse_Stderr{Stderr: []byte("corral: warning: " + l + "\n")}})
	}
}

// bringUp provisions and starts plan's sandbox as a persistent session,
// with its audit log and credentials (creds, as stored), and serves its
// egress; on failure nothing of it is left.
func (s *Server) bringUp(ctx context.Context, id string, p Provider, plan *provider.Plan, creds []store.Credential) (*held, error) {
	log, err := s.openAudit(id)
	if err != nil {
		return nil, err
	}
	step := func(step string) { fault("create-after-" + strings.TrimSuffix(step, "ed")) }
	if slots := s.starts[p.Name()]; slots != nil {
		slots <- struct{}{}
		defer func() { <-slots }()
	}
	sess, err := session.Open(ctx, s.sessionConfig(p, id, plan, log, step, creds))
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	h, err := hold(p, sess, log)
	if err != nil {
		_ = sess.Close()
		_ = log.Close()
		return nil, err
	}
	return h, nil
}

// sessionConfig is the session of gateway sandbox id, with the values of
// its stored credentials. No credential reads the gateway's environment
// (checkSources refuses env sources): its Environ is empty.
func (s *Server) sessionConfig(p Provider, id string, plan *provider.Plan, log *audit.Log, step func(string), creds []store.Credential) session.Config {
	values, states := secrets(plan.Policy, creds)
	return session.Config{Provider: p, Plan: plan, Log: log, Version: s.cfg.Version, Step: step,
		Options: provider.ProvisionOptions{ID: id, Persistent: true, Owner: s.cfg.Instance},
		Environ: []string{}, Secrets: values, CredentialStates: states}
}

// removeLogs removes a deleted sandbox's output and audit logs (a
// gateway that kept them would grow without bound).
func (s *Server) removeLogs(id string) {
	for _, p := range []string{s.logPath(id), s.auditPath(id), s.auditPath(id) + ".1"} {
		_ = os.Remove(p)
	}
}

// auditPath is sandbox id's audit log.
func (s *Server) auditPath(id string) string { return filepath.Join(s.cfg.LogDir, id+".audit.jsonl") }

// openAudit opens sandbox id's audit log: rotated at MaxLog as the output
// log is bounded, denials beyond audit.MaxDenied a minute aggregated.
func (s *Server) openAudit(id string) (*audit.Log, error) {
	if err := os.MkdirAll(s.cfg.LogDir, 0o700); err != nil {
		return nil, err
	}
	return audit.OpenLog(s.auditPath(id), audit.LogOptions{MaxBytes: MaxLog, Window: time.Minute})
}

func (s *Server) GetSandbox(ctx context.Context, req *connect.Request[gw.GetSandboxRequest]) (*connect.Response[gw.GetSandboxResponse], error) {
	req.Msg.Id = s.idOf(req.Msg.Id)
	rec, err := s.cfg.Store.Get(req.Msg.Id)
	if err != nil {
		return nil, storeErr(req.Msg.Id, err)
	}
	evs, err := s.cfg.Store.Events(rec.ID, 0)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &gw.GetSandboxResponse{Sandbox: s.withEffective(ctx, toProto(rec))}
	for _, e := range evs {
		out.Events = append(out.Events, toEvent(e))
	}
	return connect.NewResponse(out), nil
}

func (s *Server) ListSandboxes(ctx context.Context, req *connect.Request[gw.ListSandboxesRequest]) (*connect.Response[gw.ListSandboxesResponse], error) {
	recs, err := s.cfg.Store.List()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &gw.ListSandboxesResponse{}
	for _, r := range recs {
		out.Sandboxes = append(out.Sandboxes, s.withEffective(ctx, toProto(r)))
	}
	return connect.NewResponse(out), nil
}

// ExecSandbox runs one command in a ready sandbox and streams its output,
// then its exit status.
func (s *Server) ExecSandbox(ctx context.Context, req *connect.Request[gw.ExecSandboxRequest], stream *connect.ServerStream[gw.ExecSandboxResponse]) error {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	go func() { _, _ = stdinW.Write(req.Msg.Stdin); stdinW.Close() }()
	defer stdinR.Close()
	m := req.Msg
	m.Tty = false // a terminal needs the streaming call (resizes, input as typed)
	return s.runExec(ctx, m, stdinR, nil, stream.Send)
}

// ExecSandboxStream is the interactive exec: the first message starts the
// command; stdin chunks, resizes and the end of stdin follow as they come.
func (s *Server) ExecSandboxStream(ctx context.Context, stream *connect.BidiStream[gw.ExecStreamRequest, gw.ExecSandboxResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	m := first.GetStart()
	if m == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be start"))
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	defer stdinR.Close()
	resize := make(chan [2]uint16, 4)
	if m.Tty && m.Rows > 0 {
		resize <- [2]uint16{uint16(m.Rows), uint16(m.Cols)}
	}
	go func() {
		defer stdinW.Close()
		defer close(resize)
		for {
			in, err := stream.Receive()
			if err != nil {
				return
			}
			switch x := in.Input.(type) {
			case *gw.ExecStreamRequest_Stdin:
				if _, err := stdinW.Write(x.Stdin); err != nil {
					return
				}
			case *gw.ExecStreamRequest_StdinEof:
				stdinW.Close()
			case *gw.ExecStreamRequest_Resize:
				select {
				case resize <- [2]uint16{uint16(x.Resize.Rows), uint16(x.Resize.Cols)}:
				default:
				}
			}
		}
	}()
	return s.runExec(ctx, m, stdinR, resize, stream.Send)
}

// runExec runs m in its sandbox under the sandbox's gate, with stdin, and
// sends the output (also appended to the sandbox's log) and the exit.
func (s *Server) runExec(ctx context.Context, m *gw.ExecSandboxRequest, stdinR *os.File, resize <-chan [2]uint16, sendFn func(*gw.ExecSandboxResponse) error) error {
	if len(m.Args) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no command given"))
	}
	m.Id = s.idOf(m.Id)
	if _, err := s.cfg.Store.Get(m.Id); err != nil {
		return storeErr(m.Id, err) // before making a gate for an id that does not exist
	}
	reqCtx := ctx
	ctx, done := s.gate(m.Id).exec(ctx)
	defer done()
	rec, err := s.cfg.Store.Get(m.Id)
	if err != nil {
		return storeErr(m.Id, err)
	}
	s.mu.Lock()
	sb := s.live[m.Id]
	s.mu.Unlock()
	if rec.Phase != store.PhaseReady || sb == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is %s, not ready", m.Id, rec.Phase))
	}
	var sendMu sync.Mutex
	send := func(r *gw.ExecSandboxResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return sendFn(r)
	}
	logf, err := s.openLog(m.Id)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	defer logf.Close()
	var logMu sync.Mutex
	var output sync.WaitGroup // the copies of stdout and stderr
	var readers []*os.File
	pipe := func(wrap func([]byte) *gw.ExecSandboxResponse) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		readers = append(readers, r)
		output.Add(1)
		go func() {
			defer output.Done()
			defer r.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					logMu.Lock()
					logWrite(logf, buf[:n])
					logMu.Unlock()
					_ = send(wrap(append([]byte(nil), buf[:n]...)))
				}
				if err != nil {
					return
				}
			}
		}()
		return w, nil
	}
	stdout, err := pipe(func(b []byte) *gw.ExecSandboxResponse {
		return &gw.ExecSandboxResponse{Output: &gw.ExecSandboxResponse_Stdout{Stdout: b}}
	})
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	stderr, err := pipe(func(b []byte) *gw.ExecSandboxResponse {
		return &gw.ExecSandboxResponse{Output: &gw.ExecSandboxResponse_Stderr{Stderr: b}}
	})
	if err != nil {
		stdout.Close()
		return connect.NewError(connect.CodeInternal, err)
	}
	ectx := ctx
	if m.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, time.Duration(min(m.TimeoutSeconds, 7*24*3600))*time.Second)
		defer cancel()
	}
	var started func(int)
	if os.Getenv(FaultEnv) == "exec-started" {
		started = func(int) { fault("exec-started") }
	}
	s.event(m.Id, "exec", "%q", m.Args)
	// why the gateway ended the command ("" when it did not): the exit's
	// reason and the audit record's.
	timedOut := func() bool { return errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil }
	killed := func() string {
		switch {
		case timedOut():
			return fmt.Sprintf("timeout: the exec's limit of %ds expired; the command was killed", m.TimeoutSeconds)
		case ctx.Err() != nil && reqCtx.Err() == nil:
			return "the command was ended: its sandbox is being stopped, deleted or recreated"
		case reqCtx.Err() != nil:
			return "the caller went away; the command was killed"
		}
		return ""
	}
	st, err := sb.sess.Exec(ectx, session.Exec{UID: -1, Killed: killed, ExecSpec: provider.ExecSpec{Args: m.Args, Stdin: stdinR, Stdout: stdout, Stderr: stderr, TTY: m.Tty, Resize: resize,
		Started: started}})
	stdout.Close()
	stderr.Close()
	if !outputEnds(ctx, &output, readers, outputGrace) {
		s.event(m.Id, "exec", "%q: output after its exit was not collected: a process it left running holds its stdout or stderr", m.Args)
		_ = send(&gw.ExecSandboxResponse{Output: &gw.ExecSandboxResponse_Stderr{Stderr: []byte("corral: warning: a process the command left running still holds its stdout or stderr; what it writes from now on is not collected (redirect a background process's output, e.g. >/dev/null 2>&1)\n")}})
	}
	exit := &gw.Exit{Code: int32(st.Code), TimedOut: st.TimedOut, Reason: st.Reason}
	switch {
	case err == nil:
	case killed() != "":
		exit.Reason = killed()
		if timedOut() {
			exit.Code, exit.TimedOut = 124, true // as timeout(1) and corral run
		}
	default:
		if !sb.running(reqCtx) {
			s.event(m.Id, "lost", "the sandbox is gone: %v", err)
			_, _ = s.cfg.Store.Update(m.Id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Reason = store.PhaseError, "lost: the sandbox is gone" })
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is lost: it is gone (now phase error)", m.Id))
		}
		switch {
		case st.Code != 0: // the command's status stands; err says what else failed
		case provider.CodeOf(err) == provider.CodeExecFailed:
			exit.Code = int32(provider.CodeExecFailed.ExitCode()) // 127, as corral run: the command could not start
		default:
			return connect.NewError(connect.CodeUnknown, err)
		}
		exit.Reason = err.Error()
	}
	s.checkPlanted(sb, &rec, send) // before the exit, after which the caller stops reading
	if exit.Reason != "" {
		s.event(m.Id, "exit", "%q: exit %d (%s)", m.Args, exit.Code, exit.Reason)
	} else {
		s.event(m.Id, "exit", "%q: exit %d", m.Args, exit.Code)
	}
	return send(&gw.ExecSandboxResponse{Output: &gw.ExecSandboxResponse_Exit{Exit: exit}})
}

// outputGrace is how long an exec's output is still collected after the
// command exited, while a process it left running holds its stdout or
// stderr (sh -c 'sleep 1000 &').
const outputGrace = 2 * time.Second

// outputEnds waits until the copies of an exec's output (wg) reach the
// end of their pipes, at most grace or until ctx ends; then it closes the
// pipes' read ends (readers), so that a lingering writer gets EPIPE, and
// reports false.
func outputEnds(ctx context.Context, wg *sync.WaitGroup, readers []*os.File, grace time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	for _, r := range readers {
		r.Close()
	}
	<-done
	return false
}

// withEffective fills in what runs now (running, gone or none) and
// whether connections can be forwarded to it.
func (s *Server) withEffective(ctx context.Context, p *gw.Sandbox) *gw.Sandbox {
	s.mu.Lock()
	sb := s.live[p.Id]
	s.mu.Unlock()
	switch {
	case p.Phase != store.PhaseReady:
		p.Effective = "none"
	case sb == nil:
		p.Effective = "gone"
	default:
		p.Effective = "running"
		if !sb.running(ctx) {
			p.Effective = "gone"
		}
		_, p.PortForwarding = sb.sess.Sandbox().(provider.PortDialer)
		p.PortForwarding = p.PortForwarding && p.Effective == "running"
	}
	return p
}

// WatchSandbox streams the sandbox (first, then on every change of its
// resource version) and its new events, polling the store.
func (s *Server) WatchSandbox(ctx context.Context, req *connect.Request[gw.WatchSandboxRequest], stream *connect.ServerStream[gw.WatchSandboxResponse]) error {
	id, after := s.idOf(req.Msg.Id), req.Msg.AfterSeq
	var version int64 = -1
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		rec, err := s.cfg.Store.Get(id)
		if errors.Is(err, store.ErrNotFound) && version >= 0 {
			return nil // deleted: the watch ends
		}
		if err != nil {
			return storeErr(id, err)
		}
		evs, err := s.cfg.Store.Events(id, after) // only the new ones
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		out := &gw.WatchSandboxResponse{}
		if rec.Version != version {
			out.Sandbox = s.withEffective(ctx, toProto(rec))
			version = rec.Version
		}
		for _, e := range evs {
			out.Events = append(out.Events, toEvent(e))
			after = e.Seq
		}
		if out.Sandbox != nil || len(out.Events) > 0 {
			if err := stream.Send(out); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// MaxLog bounds a sandbox's output log (bytes): output beyond it is not
// kept (the command still gets it), so a command cannot fill the
// gateway's disk.
const MaxLog = 64 << 20

// logWrite appends b to the log unless it is full; the first write that
// does not fit leaves a note instead.
func logWrite(f *os.File, b []byte) {
	fi, err := f.Stat()
	if err != nil {
		return
	}
	note := fmt.Sprintf("\n[corral: the log is full (%d MiB); later output is not kept]\n", MaxLog>>20)
	switch size := fi.Size(); {
	case size+int64(len(b)) <= MaxLog:
		_, _ = f.Write(b)
	case size <= MaxLog:
		_, _ = f.Write([]byte(note))
	}
}

// logPath is the sandbox's output log.
func (s *Server) logPath(id string) string { return filepath.Join(s.cfg.LogDir, id+".log") }

func (s *Server) openLog(id string) (*os.File, error) {
	if err := os.MkdirAll(s.cfg.LogDir, 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(s.logPath(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}

// LogsSandbox streams the sandbox's output log from the start; with
// follow it goes on with what is written later, until the sandbox is
// deleted or the caller goes away.
func (s *Server) LogsSandbox(ctx context.Context, req *connect.Request[gw.LogsSandboxRequest], stream *connect.ServerStream[gw.LogsSandboxResponse]) error {
	id := s.idOf(req.Msg.Id)
	return s.tail(ctx, id, s.logPath(id), req.Msg.Follow, false, func(b []byte) error {
		return stream.Send(&gw.LogsSandboxResponse{Data: b})
	})
}

// AuditSandbox streams the sandbox's audit log (whole JSON lines) from the
// start; with follow it goes on with what is written later, until the
// sandbox is deleted or the caller goes away.
func (s *Server) AuditSandbox(ctx context.Context, req *connect.Request[gw.AuditSandboxRequest], stream *connect.ServerStream[gw.AuditSandboxResponse]) error {
	id := s.idOf(req.Msg.Id)
	return s.tail(ctx, id, s.auditPath(id), req.Msg.Follow, true, func(b []byte) error {
		return stream.Send(&gw.AuditSandboxResponse{Data: b})
	})
}

// tail sends the file at path from the start, in chunks (whole lines
// only, with lines), and with follow what is appended later, polling,
// until sandbox id is deleted or ctx ends. A file that shrank was rotated:
// it is read again from its start.
func (s *Server) tail(ctx context.Context, id, path string, follow, lines bool, send func([]byte) error) error {
	if _, err := s.cfg.Store.Get(id); err != nil {
		return storeErr(id, err)
	}
	var off int64
	buf := make([]byte, 64<<10)
	for {
		// Never a link or a fifo put in its place: only the gateway writes
		// LOGDIR (New), but what it streams must be its own file.
		f, err := openLog(path)
		if err == nil {
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
				f.Close()
				return connect.NewError(connect.CodeInternal, fmt.Errorf("%s is not a regular file", path))
			}
			if fi, err := f.Stat(); err == nil && fi.Size() < off {
				off = 0
			}
			for {
				n, rerr := f.ReadAt(buf, off)
				chunk := buf[:n]
				if lines { // whole lines only: the last may be partly written
					if k := bytes.LastIndexByte(chunk, '\n'); k >= 0 {
						chunk = chunk[:k+1]
					} else if n < len(buf) {
						chunk = nil // a line longer than buf goes in pieces
					}
				}
				if len(chunk) > 0 {
					off += int64(len(chunk))
					if err := send(append([]byte(nil), chunk...)); err != nil {
						f.Close()
						return err
					}
				}
				if rerr != nil || (lines && len(chunk) == 0) {
					break
				}
			}
			f.Close()
		} else if !errors.Is(err, os.ErrNotExist) {
			return connect.NewError(connect.CodeInternal, err)
		}
		if !follow {
			return nil
		}
		if _, err := s.cfg.Store.Get(id); errors.Is(err, store.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StartSandbox brings a stopped sandbox up again with its policy in
// force: the intent (provisioning, desired running) is stored first; the
// result is ready, or error with the reason.
func (s *Server) StartSandbox(ctx context.Context, req *connect.Request[gw.StartSandboxRequest]) (*connect.Response[gw.StartSandboxResponse], error) {
	id := s.idOf(req.Msg.Id)
	rec, unlock, err := s.lockRecord(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec.Phase != store.PhaseStopped {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is %s: only a stopped sandbox starts", id, rec.Phase))
	}
	p, err := s.providerOf(rec)
	if err != nil {
		return nil, err
	}
	creds, err := s.cfg.Store.Credentials(id)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	_, plan, loss, err := s.mapPolicy(ctx, p, rec.PolicyYAML, rec.Image, rec.Workdir, placeholders(creds))
	if err != nil {
		return nil, err // the host changed since (a grant gone): the record stays stopped
	}
	rec, err = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) {
		r.Phase, r.Desired, r.Reason = store.PhaseProvisioning, "running", "starting again"
	})
	if err != nil {
		return nil, storeErr(id, err)
	}
	sb, err := s.bringUp(context.WithoutCancel(ctx), id, p, plan, creds)
	if err != nil {
		s.event(id, "error", "start: %v", err)
		_, _ = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Reason = store.PhaseError, "start: "+err.Error() })
		return nil, connect.NewError(connect.CodeUnknown, fmt.Errorf("sandbox %s: start: %w", id, err))
	}
	layers, _ := json.Marshal(sb.sess.Layers())
	lossJSON, _ := json.Marshal(loss)
	s.mu.Lock()
	s.putLive(id, sb)
	s.mu.Unlock()
	rec, err = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) {
		r.Phase, r.Reason, r.Layers, r.Losses, r.ProviderState = store.PhaseReady, "", string(layers), string(lossJSON), sb.state()
	})
	if err != nil {
		_ = s.release(context.WithoutCancel(ctx), id, p)
		return nil, storeErr(id, err)
	}
	s.event(id, "ready", "started again; layers verified from outside")
	return connect.NewResponse(&gw.StartSandboxResponse{Sandbox: toProto(rec)}), nil
}

// StopSandbox ends a sandbox's workload and releases its resources; the
// record stays (phase stopped) until DeleteSandbox.
func (s *Server) StopSandbox(ctx context.Context, req *connect.Request[gw.StopSandboxRequest]) (*connect.Response[gw.StopSandboxResponse], error) {
	id := s.idOf(req.Msg.Id)
	rec, unlock, err := s.lockRecord(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec.Phase == store.PhaseStopped {
		return connect.NewResponse(&gw.StopSandboxResponse{Sandbox: toProto(rec)}), nil
	}
	rec, err = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Desired, r.Reason = store.PhaseStopping, "stopped", "" })
	if err != nil {
		return nil, storeErr(id, err)
	}
	fault("stop-after-intent")
	if err := s.releaseRecord(context.WithoutCancel(ctx), rec); err != nil {
		rec, _ = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Reason = store.PhaseError, err.Error() })
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	rec, err = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Layers = store.PhaseStopped, "[]" })
	if err != nil {
		return nil, storeErr(id, err)
	}
	s.event(id, "stopped", "sandbox removed")
	return connect.NewResponse(&gw.StopSandboxResponse{Sandbox: toProto(rec)}), nil
}

// DeleteSandbox releases a sandbox's resources and removes its record.
func (s *Server) DeleteSandbox(ctx context.Context, req *connect.Request[gw.DeleteSandboxRequest]) (*connect.Response[gw.DeleteSandboxResponse], error) {
	id := s.idOf(req.Msg.Id)
	rec, unlock, err := s.lockRecord(id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err = s.cfg.Store.Update(id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Desired = store.PhaseDeleting, "deleted" })
	if err != nil {
		return nil, storeErr(id, err)
	}
	fault("delete-after-intent")
	if err := s.releaseRecord(context.WithoutCancel(ctx), rec); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if err := s.cfg.Store.Delete(id, rec.Version); err != nil {
		return nil, storeErr(id, err)
	}
	s.removeLogs(id)
	s.mu.Lock()
	delete(s.gates, id) // later callers find no record
	s.mu.Unlock()
	return connect.NewResponse(&gw.DeleteSandboxResponse{}), nil
}

// release stops the sandbox's workload and removes the sandbox, its
// state and its egress proxy, and closes its audit log (which stays);
// idempotent.
func (s *Server) release(ctx context.Context, id string, p Provider) error {
	s.mu.Lock()
	h := s.live[id]
	s.dropLive(id)
	s.mu.Unlock()
	if h != nil {
		h.close()
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return p.Destroy(c, id)
}

// releaseRecord is release on the provider rec names.
func (s *Server) releaseRecord(ctx context.Context, rec store.Sandbox) error {
	p, err := s.providerOf(rec)
	if err != nil {
		return err
	}
	return s.release(ctx, rec.ID, p)
}

// provider is the gateway's provider named name ("": the default).
func (s *Server) provider(name string) (Provider, error) {
	if name == "" {
		name = s.cfg.Default
	}
	var names []string
	for _, p := range s.cfg.Providers {
		if name == "" || p.Name() == name {
			return p, nil
		}
		names = append(names, p.Name())
	}
	return nil, fmt.Errorf("provider %q: this gateway runs sandboxes on %s (--provider of corral gateway serve chooses them)", name, strings.Join(names, ", "))
}

// providerOf is the provider of record rec.
func (s *Server) providerOf(rec store.Sandbox) (Provider, error) {
	p, err := s.provider(rec.Provider)
	if err != nil || rec.Provider == "" {
		return nil, provider.Errorf(provider.CodeUnavailable, "sandbox %s is on provider %q, which this gateway does not run", rec.ID, rec.Provider)
	}
	return p, nil
}

// recover reattaches to the persistent sandbox of record r (plan may be
// nil) with its audit log and its stored credentials (creds).
func (s *Server) recover(ctx context.Context, r store.Sandbox, p Provider, plan *provider.Plan, creds []store.Credential) (*held, error) {
	if plan == nil { // the session needs the policy (egress rules, trees to scan)
		return nil, provider.Errorf(provider.CodeNotFound, "its policy no longer resolves (a link planted in a granted tree?), so its egress rules and trees cannot be served")
	}
	log, err := s.openAudit(r.ID)
	if err != nil {
		return nil, err
	}
	sess, err := session.Recover(ctx, s.sessionConfig(p, r.ID, plan, log, nil, creds), []byte(r.ProviderState))
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	h, err := hold(p, sess, log)
	if err != nil {
		sess.Detach() // left as it is: nothing is destroyed on a guess
		_ = log.Close()
		return nil, err
	}
	return h, nil
}

// Close releases what this process holds without stopping any sandbox
// (egress proxies, audit logs): they outlive the gateway and are adopted
// by the next one.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, h := range s.live {
		h.sess.Detach()
		_ = h.log.Close()
		s.dropLive(id)
	}
}

func storeErr(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no sandbox %s", id))
	case errors.Is(err, store.ErrStale):
		return connect.NewError(connect.CodeAborted, fmt.Errorf("sandbox %s changed meanwhile: retry", id))
	}
	return connect.NewError(connect.CodeInternal, err)
}

func toEvent(e store.Event) *gw.Event {
	return &gw.Event{Seq: e.Seq, Time: e.Time.UTC().Format(time.RFC3339Nano), Kind: e.Kind, Message: e.Message}
}

func toProto(r store.Sandbox) *gw.Sandbox {
	out := &gw.Sandbox{Id: r.ID, Provider: r.Provider, Phase: r.Phase, Reason: r.Reason, Desired: r.Desired, ResourceVersion: r.Version, PolicyRevision: r.PolicyRevision,
		PolicyHash: r.PolicyHash, Image: r.Image, Workdir: r.Workdir,
		Name: r.Name, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339), UpdatedAt: r.UpdatedAt.UTC().Format(time.RFC3339)}
	var layers []provider.LayerStatus
	_ = json.Unmarshal([]byte(r.Layers), &layers)
	for _, l := range layers {
		out.Layers = append(out.Layers, &gw.Layer{Layer: string(l.Layer), Requirement: string(l.Required), State: string(l.State), Detail: l.Detail})
	}
	var loss provider.LossReport
	_ = json.Unmarshal([]byte(r.Losses), &loss)
	for _, l := range loss {
		out.Losses = append(out.Losses, &gw.Loss{Severity: string(l.Severity), Area: l.Area, Field: l.Field, Message: l.Message})
	}
	return out
}
