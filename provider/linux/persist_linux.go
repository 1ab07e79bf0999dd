//go:build linux

package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/detached"
	"github.com/corral-sandbox/corral/internal/placeholder"
	"github.com/corral-sandbox/corral/internal/procstat"
	"github.com/corral-sandbox/corral/internal/trust"
	"github.com/corral-sandbox/corral/internal/trustfile"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux/cgroup"
)

// A persistent linux sandbox is held by a supervisor of its own (this
// binary run as PersistArg DIR), started detached from the process that
// provisioned it (internal/detached, the core a service's supervisor
// uses too): the supervisor makes the sandbox (cgroup, placeholders, init
// in new namespaces, every layer verified from outside), then serves a
// unix socket in the sandbox's state directory, DIR = StateDirEnv's or
// the default base + "/" + id, 0700:
//
//	hello  the layers, verified again; init's identity; the egress
//	       listener (network proxy), for the caller's proxy to serve
//	exec   a socket of the exec's own, straight to init, which forks the
//	       process (servePersistent); the caller speaks the exec
//	       protocol on it (runExec) and closing it kills the process
//	grant, revoke, grants
//	       the sandbox's live folder grants (provider.LiveGrants): the
//	       slot holder is the supervisor's child, so grants outlive
//	       the caller that made them, as the sandbox does
//	dial   a TCP connection to a port on the sandbox's own loopback,
//	       made by init in its network namespace and connected by the
//	       supervisor (provider.PortDialer, dial_linux.go)
//
// hello also hands over the consent channel's listener (ConsentPort),
// which the caller serves.
//
// Only a process of the supervisor's own pid namespace and uid (or root)
// is served (a refusal is logged), so nothing inside the sandbox can
// reach it; nor is DIR ever in a sandbox (stateGrant). SIGTERM ends the
// sandbox; so does the supervisor's death (init has a parent-death
// signal). DIR holds owner (for Managed), supervisor.json (its pid and
// start time), supervisor.log, sock and, until the supervisor has
// released them, placeholders.json (for Destroy).

// PersistArg is argv[1] that makes the corral binary a persistent
// sandbox's supervisor (PersistMain).
const PersistArg = "__corral_persist"

// StateDirEnv overrides where persistent sandboxes keep their state.
const StateDirEnv = "CORRAL_LINUX_STATE_DIR"

// persistPATH is the supervisor's PATH.
const persistPATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// StateBase is the directory of the caller's persistent sandboxes:
// $CORRAL_LINUX_STATE_DIR, or runtime state gone at reboot (as the
// sandboxes are): /run/corral/sandboxes for root, else
// $XDG_RUNTIME_DIR/corral/sandboxes or /tmp/corral-UID/sandboxes. Every
// directory up to it is checked (internal/trust) when it is made.
func StateBase() string {
	if d := os.Getenv(StateDirEnv); filepath.IsAbs(d) {
		return filepath.Clean(d)
	}
	if os.Getuid() == 0 {
		return "/run/corral/sandboxes"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "corral", "sandboxes")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("corral-%d", os.Getuid()), "sandboxes")
}

// persistSpec is what the supervisor is handed on its stdin: the plan
// (provider.Plan's Details and the parts of the policy a sandbox needs).
type persistSpec struct {
	ID           string                 `json:"id"`
	Spec         *InitSpec              `json:"spec"`
	Env          []string               `json:"env"` // InitSpec.Env, which its JSON leaves out
	Layers       []provider.LayerStatus `json:"layers"`
	Grants       []policy.PathGrant     `json:"grants"`
	Placeholders []policy.Placeholder   `json:"placeholders"`
	Limits       policy.Limits          `json:"limits"`
}

// persistReq is one request on the supervisor's socket.
type persistReq struct {
	Op     string   `json:"op"` // hello, exec, grant, revoke, grants, dial
	Args   []string `json:"args,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	TTY    bool     `json:"tty,omitempty"`
	NFiles int      `json:"nfiles,omitempty"`
	Rows   uint16   `json:"rows,omitempty"` // with TTY: the terminal's size at the start
	Cols   uint16   `json:"cols,omitempty"`
	// Grant is what grant mounts; Label and Kill, what revoke takes.
	Grant *provider.FolderGrant `json:"grant,omitempty"`
	Label string                `json:"label,omitempty"`
	Kill  bool                  `json:"kill,omitempty"`
	// Port and TimeoutMS are what dial connects to and how long it waits.
	Port      int   `json:"port,omitempty"`
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// persistReply answers a persistReq, or tells the launcher how the start
// went (on the readiness pipe).
type persistReply struct {
	OK     bool                   `json:"ok,omitempty"`
	Code   provider.Code          `json:"code,omitempty"`
	Layer  string                 `json:"layer,omitempty"`
	Error  string                 `json:"error,omitempty"`
	Layers []provider.LayerStatus `json:"layers,omitempty"`
	Init   detached.Proc          `json:"init,omitzero"`
	// Listeners names hello's fds, in order: "egress", "consent".
	Listeners []string               `json:"listeners,omitempty"`
	Grant     *provider.GrantStatus  `json:"grant,omitempty"`  // grant, revoke
	Grants    []provider.GrantStatus `json:"grants,omitempty"` // grants
	// Errno is a failed dial's errno (ECONNREFUSED: nothing listens).
	Errno int `json:"errno,omitempty"`
}

// replyErr carries err's code and layer apart from its message, so that
// the caller's provider.Error says each once.
func replyErr(err error) persistReply {
	r := persistReply{Code: provider.CodeOf(err), Error: err.Error()}
	var pe *provider.Error
	if errors.As(err, &pe) {
		r.Layer, r.Error = pe.Layer, pe.Msg
		if pe.Err != nil {
			r.Error = strings.TrimPrefix(r.Error+": "+pe.Err.Error(), ": ")
		}
	}
	return r
}

func (r persistReply) err() error {
	if r.OK {
		return nil
	}
	return &provider.Error{Code: r.Code, Layer: r.Layer, Msg: r.Error}
}

// persistState is what State returns and Recover takes: the sandbox's id
// (its supervisor names itself in DIR/supervisor.json).
type persistState struct {
	ID string `json:"id"`
}

// sandboxDir is id's state directory, or an error for an id NewID did not
// make (nothing else may name a path).
func sandboxDir(id string) (string, error) {
	if !provider.IsID(id) {
		return "", provider.Errorf(provider.CodeNotFound, "linux: %q is not a sandbox id", id)
	}
	return filepath.Join(StateBase(), id), nil
}

// provisionPersistent makes the state directory of a persistent sandbox;
// Start launches its supervisor.
func provisionPersistent(plan *provider.Plan, spec *InitSpec, opts provider.ProvisionOptions) (provider.Sandbox, error) {
	if len(spec.ServePorts) > 0 {
		return nil, provider.Errorf(provider.CodeUnavailable, "linux: a persistent sandbox serves no ports")
	}
	id := opts.ID
	if id == "" {
		id = provider.NewID()
	}
	dir, err := sandboxDir(id)
	if err != nil {
		return nil, provider.Errorf(provider.CodeProvisionFailed, "linux: sandbox id %q: want NewID's shape", id)
	}
	if err := refuseStateGrant(plan.Policy); err != nil {
		return nil, err
	}
	// The workload may listen on its own loopback, which only DialServed
	// (corral sandbox forward) reaches.
	spec.Landlock.BindAny = true
	if err := trust.MkdirAll(StateBase(), 0o700, uint32(os.Geteuid()), nil); err != nil {
		return nil, provider.Wrap(provider.CodeProvisionFailed, "linux: state directory", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, provider.Wrap(provider.CodeProvisionFailed, "linux: sandbox "+id, err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "owner"), []byte(opts.Owner), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, provider.Wrap(provider.CodeProvisionFailed, "linux: sandbox "+id, err)
	}
	if spec, err = stateFiles(spec, plan.Policy, dir, opts); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	spec.FaultLayer = os.Getenv(FaultEnv)
	spec.DropLayer = testDropLayer()
	spec.Persistent = true
	return &persistent{id: id, dir: dir, plan: plan, spec: spec, execs: map[int]bool{}}, nil
}

// placeholdersFile, in a sandbox's state directory, lists the
// placeholders its supervisor holds, until it has released them.
const placeholdersFile = "placeholders.json"

// releasePlaceholders removes the placeholders that the supervisor of DIR
// was killed too soon to release (its list is still there): each one no
// other run holds, still empty and marked (internal/placeholder).
func releasePlaceholders(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, placeholdersFile))
	var phs []policy.Placeholder
	if err != nil || json.Unmarshal(b, &phs) != nil {
		return
	}
	for _, ph := range phs {
		if set, err := placeholder.Acquire(&policy.Resolved{Placeholders: []policy.Placeholder{ph}}); err == nil {
			set.Release()
		}
	}
}

// stateGrant is the grant of r through which its sandbox would see base,
// the state directory of every persistent sandbox of ours (a workload
// that could write there could replace a supervisor's record, the one
// thing Destroy and Recover go by), or none.
func stateGrant(r *policy.Resolved, base string) policy.PathGrant {
	if r == nil {
		return policy.PathGrant{}
	}
	if r.Visible(base) {
		return r.Covering(base)
	}
	for _, g := range r.Grants {
		if g.Access != policy.AccessDeny && policy.Within(g.Path, base) {
			return g
		}
	}
	return policy.PathGrant{}
}

// persistent is the caller's side of a persistent sandbox.
type persistent struct {
	id   string
	dir  string
	plan *provider.Plan
	spec *InitSpec // nil for a recovered one

	mu      sync.Mutex
	sup     detached.Proc
	init    detached.Proc
	layers  []provider.LayerStatus
	egress  net.Listener
	consent net.Listener // the consent channel's (ConsentPort), or nil
	execs   map[int]bool // the sockets of the execs in flight (Signal)
}

func (s *persistent) ID() string { return s.id }

func (s *persistent) State() []byte {
	b, _ := json.Marshal(persistState{ID: s.id})
	return b
}

func (s *persistent) supervisor() detached.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sup
}

// Running reports whether the supervisor and init both run (by pid and
// start time).
func (s *persistent) Running(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sup.Alive() && s.init.Alive()
}

func (s *persistent) Layers() []provider.LayerStatus { return s.layers }

func (s *persistent) EgressListener() net.Listener { return s.egress }

// ConsentListener is the consent channel's listener inside the sandbox,
// handed over by the supervisor at hello, or nil
// (provider.ConsentChannel).
func (s *persistent) ConsentListener() net.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.consent
}

// ConsentPeer names the process behind c, accepted on ConsentListener,
// from the kernel's tables of init's namespaces (provider.PeerResolver).
func (s *persistent) ConsentPeer(c net.Conn) (int, string, bool) {
	s.mu.Lock()
	pid := s.init.PID
	s.mu.Unlock()
	return consentPeer(pid, c)
}

// GrantFolder asks the supervisor, whose slot holder mounts g
// (provider.LiveGrants; Sandbox.GrantFolder says the rest).
func (s *persistent) GrantFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	r, err := s.grantCall(persistReq{Op: "grant", Grant: &g})
	if err != nil || r.Grant == nil {
		return provider.GrantStatus{}, err
	}
	return *r.Grant, nil
}

// RevokeFolder asks the supervisor to revoke grant label
// (Sandbox.RevokeFolder).
func (s *persistent) RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error) {
	r, err := s.grantCall(persistReq{Op: "revoke", Label: label, Kill: kill})
	if r.Grant != nil {
		return *r.Grant, err
	}
	return provider.GrantStatus{}, err
}

// FolderGrants are the supervisor's grants, read back now
// (Sandbox.FolderGrants).
func (s *persistent) FolderGrants(ctx context.Context) ([]provider.GrantStatus, error) {
	r, err := s.grantCall(persistReq{Op: "grants"})
	return r.Grants, err
}

// grantCall sends one of the grant requests and returns the reply, an
// error for a refusal (its code and layer kept) or a supervisor gone.
func (s *persistent) grantCall(req persistReq) (persistReply, error) {
	r, fds, err := s.call(req, nil)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		if !s.supervisor().Alive() {
			return r, provider.Errorf(provider.CodeNotFound, "linux: sandbox %s is gone (its supervisor ended)", s.id)
		}
		return r, provider.Wrap(provider.CodeInternal, "linux: sandbox "+s.id+": supervisor", err)
	}
	return r, r.err()
}

// InitPID is init's host pid (provider.HostView).
func (s *persistent) InitPID() int { return s.init.PID }

// Start launches the supervisor and waits until it has made the sandbox
// (or says why it could not), then says hello.
func (s *persistent) Start(ctx context.Context) error {
	if s.spec == nil {
		return provider.Errorf(provider.CodeStartFailed, "linux: sandbox %s was recovered, not provisioned here", s.id)
	}
	if s.supervisor().PID != 0 {
		// A second supervisor would take over the state directory (its
		// record, its socket) and leave the first one's sandbox running.
		return provider.Errorf(provider.CodeStartFailed, "linux: sandbox %s was started already", s.id)
	}
	ps := persistSpec{ID: s.id, Spec: s.spec, Env: s.spec.Env, Layers: s.plan.Layers, Grants: s.plan.Policy.Grants,
		Placeholders: s.plan.Policy.Placeholders, Limits: s.plan.Policy.Limits}
	b, err := json.Marshal(ps)
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "linux: plan", err)
	}
	// For Destroy, should the supervisor be killed before it releases
	// them (releasePlaceholders).
	if phs := s.plan.Policy.Placeholders; len(phs) > 0 {
		pb, _ := json.Marshal(phs)
		if err := atomicfile.Write(filepath.Join(s.dir, placeholdersFile), pb, 0o600); err != nil {
			return provider.Wrap(provider.CodeStartFailed, "linux: sandbox "+s.id, err)
		}
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "linux: supervisor log", err)
	}
	defer log.Close()
	in, out, err := os.Pipe()
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "linux: supervisor", err)
	}
	// The state directory is named to the supervisor, whose environment
	// has none of what chose it (XDG_RUNTIME_DIR, TMPDIR).
	env := provider.WithEnv(detached.Env(persistPATH), []string{StateDirEnv + "=" + filepath.Dir(s.dir)})
	sup, ready, err := detached.Start("/proc/self/exe", []string{PersistArg, s.dir}, env, log, in)
	in.Close()
	if err != nil {
		out.Close()
		return provider.Wrap(provider.CodeStartFailed, "linux: supervisor", err)
	}
	defer ready.Close()
	s.mu.Lock()
	s.sup = sup
	s.mu.Unlock()
	go func() { _, _ = out.Write(b); out.Close() }()
	wait := 2 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	var r persistReply
	if err := detached.ReadReady(ready, wait, &r); err != nil {
		return provider.Wrap(provider.CodeStartFailed, "linux: sandbox "+s.id, fmt.Errorf("%w%s", err, logTail(filepath.Join(s.dir, "supervisor.log"))))
	}
	if err := r.err(); err != nil {
		return err
	}
	return s.hello()
}

// logTail is the last lines of a supervisor's log, for an error.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	if t := strings.TrimSpace(string(b)); t != "" {
		return " (" + path + ": " + t + ")"
	}
	return ""
}

// dial connects to the supervisor's socket and checks, with SO_PEERCRED,
// that the recorded supervisor holds it.
func (s *persistent) dial() (*net.UnixConn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(s.dir, "sock"), Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	cred, err := peerCred(c)
	if sup := s.supervisor(); err == nil && (int(cred.Pid) != sup.PID || !sup.Alive()) {
		err = fmt.Errorf("the socket is held by pid %d, not the sandbox's supervisor %d (started at tick %d)", cred.Pid, sup.PID, sup.Start)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// call sends req with files and reads the reply and the fds it carries.
func (s *persistent) call(req persistReq, files []int) (persistReply, []int, error) {
	c, err := s.dial()
	if err != nil {
		return persistReply{}, nil, err
	}
	defer c.Close()
	b, _ := json.Marshal(req)
	var oob []byte
	if len(files) > 0 {
		oob = unix.UnixRights(files...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return persistReply{}, nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	buf, oobBuf := make([]byte, 1<<20), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oobBuf)
	fds := rightsOf(oobBuf[:oobn])
	if err == nil && n == 0 {
		err = errors.New("the supervisor closed the connection")
	}
	var r persistReply
	if err == nil {
		err = json.Unmarshal(buf[:n], &r)
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return persistReply{}, nil, err
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	return r, fds, nil
}

// hello asks the supervisor for the layers (verified again from outside),
// init's identity and the egress listener.
func (s *persistent) hello() error {
	r, fds, err := s.call(persistReq{Op: "hello"}, nil)
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "linux: sandbox "+s.id+": supervisor", err)
	}
	if err := r.err(); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return err
	}
	var egress, consent net.Listener
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "listener")
		if i >= len(r.Listeners) {
			f.Close()
			continue
		}
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return provider.Wrap(provider.CodeStartFailed, r.Listeners[i]+" listener", err)
		}
		switch r.Listeners[i] {
		case "egress":
			egress = l
		case "consent":
			consent = l
		default:
			l.Close()
		}
	}
	s.mu.Lock()
	s.layers, s.init, s.egress, s.consent = r.Layers, r.Init, egress, consent
	s.mu.Unlock()
	return nil
}

// Exec runs spec in the sandbox: the supervisor hands back a socket
// straight to init, on which the process reports its pid and exit. The
// policy's timeout, the context's end and the caller's going away kill
// the process (its process group), not the sandbox.
func (s *persistent) Exec(ctx context.Context, spec provider.ExecSpec) (provider.ExitStatus, error) {
	t0 := time.Now()
	if len(spec.Args) == 0 {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeExecFailed, "no command given")
	}
	files, closeFiles, err := execFiles(spec)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "", err)
	}
	rows, cols := firstSize(spec)
	r, fds, err := s.call(persistReq{Op: "exec", Args: spec.Args, Dir: spec.Dir, TTY: spec.TTY, NFiles: len(files), Rows: rows, Cols: cols}, files)
	closeFiles()
	if err == nil && (r.err() != nil || len(fds) != 1) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		err = r.err()
		if err == nil {
			err = errors.New("the supervisor sent no exec socket")
		}
	}
	if err != nil {
		if !s.supervisor().Alive() {
			return provider.ExitStatus{}, provider.Errorf(provider.CodeNotFound, "linux: sandbox %s is gone (its supervisor ended)", s.id)
		}
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "linux: sandbox "+s.id, err)
	}
	sock := fds[0]
	s.mu.Lock()
	s.execs[sock] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.execs, sock)
		s.mu.Unlock()
		unix.Close(sock)
	}()
	timeout := time.Duration(0)
	if s.plan != nil && s.plan.Policy != nil {
		timeout = time.Duration(s.plan.Policy.Limits.Timeout)
	}
	return runExec(ctx, execChannel{
		fd:      sock,
		spec:    spec,
		timeout: timeout,
		hostPID: func(pid int) int { return childByNSpid(s.init.PID, pid) },
		ack:     func() error { return sendCtl(sock, execCtl{Ack: true}) },
		kill:    func() { _ = unix.Shutdown(sock, unix.SHUT_WR) },
		died: func() provider.ExitStatus {
			why := "the sandbox's init ended, and every process inside with it"
			if !s.supervisor().Alive() {
				why = "the sandbox's supervisor ended, and the sandbox with it"
			}
			return provider.ExitStatus{Code: 128 + int(unix.SIGKILL), Signal: "SIGKILL", Reason: why, Duration: time.Since(t0)}
		},
	}, t0)
}

func sendCtl(fd int, c execCtl) error {
	b, _ := json.Marshal(c)
	return unix.Sendmsg(fd, b, nil, nil, 0)
}

// childByNSpid is the host pid of init's child whose pid in the sandbox's
// namespace is nspid (the last NSpid of /proc/PID/status), 0 if none.
func childByNSpid(initPID, nspid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", initPID))
	want := strconv.Itoa(nspid)
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, c := range strings.Fields(string(b)) {
			st, err := os.ReadFile("/proc/" + c + "/status")
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(st), "\n") {
				if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
					if f := strings.Fields(rest); len(f) > 0 && f[len(f)-1] == want {
						n, _ := strconv.Atoi(c)
						return n
					}
				}
			}
		}
	}
	return 0
}

// Signal sends sig to the process group of every exec in flight.
func (s *persistent) Signal(sig os.Signal) error {
	n, ok := sig.(syscall.Signal)
	if !ok {
		return provider.Errorf(provider.CodeExecFailed, "linux: signal %v", sig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.execs) == 0 {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s runs no exec", s.id)
	}
	var errs []error
	for fd := range s.execs {
		errs = append(errs, sendCtl(fd, execCtl{Signal: int(n)}))
	}
	return errors.Join(errs...)
}

// SetTrust replaces the sandbox's CA bundle and Java trust store
// (provider.TrustUpdater): the files in its state directory, rewritten in
// place, so that every bind of them inside shows the new ones. An error
// for a sandbox made without a bundle; one made without a store (or
// store nil) keeps none.
func (s *persistent) SetTrust(pem, store []byte) error {
	for _, k := range trustKinds() {
		data := k.Of(pem, store)
		if k.Store && data == nil {
			continue
		}
		err := trustfile.Rewrite(filepath.Join(s.dir, k.Name), data)
		switch {
		case k.Store && errors.Is(err, unix.ENOENT): // made without one: nothing shows it
		case errors.Is(err, unix.ENOENT):
			return provider.Errorf(provider.CodeInternal, "linux: sandbox %s was made without a CA bundle (its policy did not inspect egress then): recreate it", s.id)
		case err != nil:
			return provider.Wrap(provider.CodeInternal, "linux: sandbox "+s.id+": "+k.What, err)
		}
	}
	return nil
}

// Stop ends the sandbox: SIGTERM to its supervisor, which kills init
// (and with it every process inside), removes its cgroup and releases its
// placeholders; SIGKILL if it has not within the grace.
func (s *persistent) Stop(ctx context.Context) error {
	s.mu.Lock()
	for _, l := range []*net.Listener{&s.egress, &s.consent} {
		if *l != nil {
			(*l).Close()
			*l = nil
		}
	}
	s.mu.Unlock()
	stopSupervisor(s.supervisor())
	return nil
}

// stopSupervisor stops a persistent sandbox's supervisor, whose init dies
// with it.
func stopSupervisor(sup detached.Proc) { detached.Stop(sup, 10*time.Second) }

// Deprovision removes what is left of the sandbox: its cgroup, should the
// supervisor have been killed, and its state directory.
func (s *persistent) Deprovision(ctx context.Context) error {
	return destroy(s.id, s.supervisor())
}

// destroy stops sandbox id's supervisor (sup, else the one its state
// directory names, else the one found by its command line) and removes
// its cgroup, the placeholders it could not release and its state
// directory.
func destroy(id string, sup detached.Proc) error {
	dir, err := sandboxDir(id)
	if err != nil {
		return nil // no such sandbox can exist
	}
	if sup.PID == 0 {
		sup = recordedSupervisor(dir)
	}
	if sup.PID == 0 {
		sup = findSupervisor(dir) // a record lost or not to be believed
	}
	stopSupervisor(sup)
	waitGone(sup)
	waitGone(record(dir))
	if err := cgroup.RemoveNamed(id); err != nil {
		return provider.LayerError(provider.CodeStopFailed, "cgroups", err)
	}
	releasePlaceholders(dir)
	if err := os.RemoveAll(dir); err != nil {
		return provider.Wrap(provider.CodeStopFailed, "linux: sandbox "+id, err)
	}
	return nil
}

// record is the process DIR/supervisor.json names, as it says.
func record(dir string) detached.Proc {
	var p detached.Proc
	if b, err := os.ReadFile(filepath.Join(dir, "supervisor.json")); err != nil || json.Unmarshal(b, &p) != nil {
		return detached.Proc{}
	}
	return p
}

// recordedSupervisor is the supervisor that DIR/supervisor.json names,
// if it still runs as one (isSupervisor).
func recordedSupervisor(dir string) detached.Proc {
	if p := record(dir); p.Alive() && isSupervisor(p.PID, dir) {
		return p
	}
	return detached.Proc{}
}

// waitGone waits, a few seconds at most, until no thread of p runs if p
// is ending (killed, by Stop or by someone else): its first thread a
// zombie, or its memory and so its command line gone, while other
// threads still hold its files, the placeholders' locks among them
// (releasePlaceholders). A process that runs as anything else is not
// waited for.
func waitGone(p detached.Proc) {
	for i := 0; p.PID > 0 && i < 250; i++ {
		st, err := procstat.Read(p.PID)
		if err != nil || st.StartTicks != p.Start {
			return // gone
		}
		if st.Running() {
			if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID)); err == nil && len(cmd) > 0 {
				return // not ending: Stop would have ended a supervisor
			}
		} else if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.PID)); err != nil || len(tasks) <= 1 {
			return // a zombie, its other threads gone
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// findSupervisor is the process that runs as DIR's supervisor
// (isSupervisor), whatever its record says, or none.
func findSupervisor(dir string) detached.Proc {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isSupervisor(pid, dir) {
			if p := detached.ProcOf(pid); p.Alive() {
				return p
			}
		}
	}
	return detached.Proc{}
}

// isSupervisor reports whether pid runs as PersistArg DIR, in our pid
// namespace, as our uid (root: as DIR's owner): a process inside a
// sandbox can take any command line, but never a pid of our namespace.
func isSupervisor(pid int, dir string) bool {
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.HasSuffix(string(cmd), "\x00"+PersistArg+"\x00"+dir+"\x00") {
		return false
	}
	uid := os.Getuid()
	var st unix.Stat_t
	if uid == 0 && unix.Lstat(dir, &st) == nil {
		uid = int(st.Uid)
	}
	status, err := ProcStatus(pid)
	uids := strings.Fields(status["Uid"])
	return err == nil && inOurPidNamespace(pid) && len(uids) > 0 && uids[0] == strconv.Itoa(uid)
}

// Recover reattaches to a persistent sandbox: the supervisor its state
// directory names must still run (by pid and start time, as PersistArg
// DIR in our pid namespace: isSupervisor) and hold its socket; the
// layers are verified from outside again. plan's policy gives the exec
// timeout.
func (p *Provider) Recover(ctx context.Context, plan *provider.Plan, state []byte) (provider.Sandbox, error) {
	var st persistState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, provider.Wrap(provider.CodeNotFound, "linux: sandbox state", err)
	}
	dir, err := sandboxDir(st.ID)
	if err != nil {
		return nil, err
	}
	sup := recordedSupervisor(dir)
	if sup.PID == 0 {
		return nil, provider.Errorf(provider.CodeNotFound, "linux: sandbox %s is gone: no supervisor of it runs", st.ID)
	}
	s := &persistent{id: st.ID, dir: dir, plan: plan, sup: sup, execs: map[int]bool{}}
	if err := s.hello(); err != nil {
		return nil, provider.Wrap(provider.CodeInternal, "linux: sandbox "+st.ID, err)
	}
	return s, nil
}

// Managed lists owner's persistent sandboxes (their state directories),
// running or not.
func (p *Provider) Managed(ctx context.Context, owner string) ([]string, error) {
	ents, err := os.ReadDir(StateBase())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if !e.IsDir() || !provider.IsID(e.Name()) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(StateBase(), e.Name(), "owner")); err == nil && string(b) == owner {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Destroy removes persistent sandbox id whatever its state.
func (p *Provider) Destroy(ctx context.Context, id string) error { return destroy(id, detached.Proc{}) }

// PersistMain is a persistent sandbox's supervisor: argv is corral
// PersistArg DIR, the plan comes on stdin, the readiness pipe is fd
// detached.ReadyFD. It never returns.
func PersistMain() {
	ready := os.NewFile(detached.ReadyFD, "ready")
	unix.CloseOnExec(detached.ReadyFD)
	_ = unix.CloseRange(detached.ReadyFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "%s corral sandbox supervisor: %v\n", time.Now().UTC().Format(time.RFC3339), err)
		detached.Tell(ready, replyErr(err))
		os.Exit(1)
	}
	if len(os.Args) != 3 {
		fail(errors.New("usage: corral " + PersistArg + " DIR"))
	}
	dir := os.Args[2]
	if d, err := sandboxDir(filepath.Base(dir)); err != nil || d != dir {
		fail(fmt.Errorf("%s is not a sandbox state directory under %s", dir, StateBase()))
	}
	self := detached.ProcOf(os.Getpid())
	if b, _ := json.Marshal(self); atomicfile.Write(filepath.Join(dir, "supervisor.json"), b, 0o600) != nil {
		fail(errors.New("cannot write " + filepath.Join(dir, "supervisor.json")))
	}
	var ps persistSpec
	if err := json.NewDecoder(os.Stdin).Decode(&ps); err != nil || ps.Spec == nil || ps.ID != filepath.Base(dir) {
		fail(fmt.Errorf("bad plan on stdin: %v", err))
	}
	ps.Spec.Env = ps.Env
	plan := &provider.Plan{Provider: Name, Layers: ps.Layers, Details: ps.Spec,
		Policy: &policy.Resolved{Grants: ps.Grants, Placeholders: ps.Placeholders, Limits: ps.Limits}}
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sb, err := newSandbox(plan, ps.Spec, ps.ID)
	if err != nil {
		fail(err)
	}
	sb.slotDir = dir // the slot holder's slot and staging area, if planned
	end := func(code int) {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sb.Stop(c)
		_ = sb.Deprovision(c)
		if sb.exited == nil || isClosed(sb.exited) { // Deprovision released the placeholders
			os.Remove(filepath.Join(dir, placeholdersFile))
		}
		os.Remove(filepath.Join(dir, "sock"))
		os.Exit(code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err = sb.Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral sandbox supervisor: %v\n", err)
		detached.Tell(ready, replyErr(err))
		end(1)
	}
	sockPath := filepath.Join(dir, "sock")
	os.Remove(sockPath)
	old := unix.Umask(0o177)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sockPath, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		detached.Tell(ready, replyErr(provider.Wrap(provider.CodeStartFailed, "linux: supervisor socket", err)))
		end(1)
	}
	l.SetUnlinkOnClose(false)
	sv := &supervisorConn{sb: sb, init: detached.ProcOf(sb.initPID)}
	for _, l := range []struct {
		name string
		l    net.Listener
	}{{"egress", sb.egress}, {"consent", sb.consent}} {
		if tl, ok := l.l.(*net.TCPListener); ok {
			f, err := tl.File()
			if err != nil {
				detached.Tell(ready, replyErr(provider.Wrap(provider.CodeStartFailed, l.name+" listener", err)))
				end(1)
			}
			sv.listeners, sv.names = append(sv.listeners, f), append(sv.names, l.name)
		}
	}
	detached.Tell(ready, persistReply{OK: true})
	ready = nil
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go sv.serve(c)
		}
	}()
	select {
	case <-sigs:
		end(0)
	case <-sb.exited:
		fmt.Fprintf(os.Stderr, "%s corral sandbox supervisor: init ended; the sandbox is gone\n", time.Now().UTC().Format(time.RFC3339))
		end(1)
	}
}

// supervisorConn serves the supervisor's socket.
type supervisorConn struct {
	mu   sync.Mutex // verify updates the sandbox's layers
	sb   *Sandbox
	init detached.Proc
	// listeners are the egress and consent listeners hello hands over
	// (those the sandbox has), names what each is.
	listeners []*os.File
	names     []string
}

// peerOK admits only a process of our pid namespace (never one inside
// the sandbox) running as our uid or root.
func peerOK(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("uid %d may not use this sandbox", cred.Uid)
	}
	if !inOurPidNamespace(int(cred.Pid)) {
		return fmt.Errorf("pid %d is not in the supervisor's pid namespace", cred.Pid)
	}
	return nil
}

// peerCred is the SO_PEERCRED of c's peer (socket(7)).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	if cerr := raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); cerr != nil {
		return nil, cerr
	}
	return cred, err
}

// inOurPidNamespace reports whether pid is in this process's pid
// namespace (never one inside a sandbox).
func inOurPidNamespace(pid int) bool {
	ours, err1 := os.Readlink("/proc/self/ns/pid")
	theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return err1 == nil && err2 == nil && ours == theirs
}

func (v *supervisorConn) serve(c *net.UnixConn) {
	defer c.Close()
	reply := func(r persistReply, fds ...int) {
		b, _ := json.Marshal(r)
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		_, _, _ = c.WriteMsgUnix(b, oob, nil)
	}
	if err := peerOK(c); err != nil {
		fmt.Fprintf(os.Stderr, "%s corral sandbox supervisor: refused: %v\n", time.Now().UTC().Format(time.RFC3339), err)
		reply(replyErr(provider.Errorf(provider.CodeExecFailed, "linux supervisor: %v", err)))
		// What the peer sent is read (and dropped, fds and all): closing
		// with it unread would reset the connection before it reads why.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _, _, _, _ = c.ReadMsgUnix(make([]byte, 1), nil)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	buf, oob := make([]byte, 1<<20), make([]byte, unix.CmsgSpace(253*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	fds := rightsOf(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var req persistReq
	if err != nil || json.Unmarshal(buf[:n], &req) != nil {
		return
	}
	switch req.Op {
	case "hello":
		v.mu.Lock()
		err := v.sb.verify()
		layers := append([]provider.LayerStatus(nil), v.sb.layers...)
		v.mu.Unlock()
		if err != nil {
			reply(replyErr(err))
			return
		}
		r := persistReply{OK: true, Layers: layers, Init: v.init, Listeners: v.names}
		var lfds []int
		for _, f := range v.listeners {
			lfds = append(lfds, int(f.Fd()))
		}
		reply(r, lfds...)
	case "grant", "revoke", "grants":
		reply(v.grants(req))
	case "dial":
		f, err := v.sb.dialLoopback(req.Port, time.Duration(min(max(req.TimeoutMS, 1), 60_000))*time.Millisecond)
		if err != nil {
			r := replyErr(provider.Wrap(provider.CodeUnavailable, "linux", err))
			var errno unix.Errno
			if errors.As(err, &errno) {
				r.Errno = int(errno)
			}
			reply(r)
			return
		}
		reply(persistReply{OK: true}, int(f.Fd()))
		f.Close()
	case "exec":
		if len(req.Args) == 0 || req.NFiles != len(fds) {
			reply(replyErr(provider.Errorf(provider.CodeExecFailed, "bad exec request")))
			return
		}
		sock, err := v.sb.openExec(req, fds)
		if err != nil {
			reply(replyErr(err))
			return
		}
		reply(persistReply{OK: true}, sock)
		unix.Close(sock)
	default:
		reply(replyErr(provider.Errorf(provider.CodeExecFailed, "unknown request %q", req.Op)))
	}
}

// grants serves the grant requests with the supervisor's sandbox, whose
// slot holder is the supervisor's child.
func (v *supervisorConn) grants(req persistReq) persistReply {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var st provider.GrantStatus
	var err error
	switch req.Op {
	case "grant":
		if req.Grant == nil {
			return replyErr(provider.Errorf(provider.CodeInternal, "grant: nothing to grant"))
		}
		st, err = v.sb.GrantFolder(ctx, *req.Grant)
	case "revoke":
		st, err = v.sb.RevokeFolder(ctx, req.Label, req.Kill)
	case "grants":
		gs, err := v.sb.FolderGrants(ctx)
		if err != nil {
			return replyErr(err)
		}
		return persistReply{OK: true, Grants: gs}
	}
	r := persistReply{OK: true}
	if err != nil {
		r = replyErr(err)
	}
	if st.Label != "" {
		r.Grant = &st
	}
	return r
}

// openExec asks init (servePersistent) to run req with fds as its files,
// over a new socket pair: one end goes to init, the other is returned.
func (s *Sandbox) openExec(req persistReq, fds []int) (int, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, provider.Wrap(provider.CodeExecFailed, "exec socket", err)
	}
	defer unix.Close(pair[1])
	r := s.request(req.Args, req.Dir, req.TTY)
	r.NFiles, r.Ack, r.Rows, r.Cols = len(fds), true, req.Rows, req.Cols
	b, _ := json.Marshal(r)
	if err := unix.Sendmsg(int(s.ctl.Fd()), b, unix.UnixRights(append([]int{pair[1]}, fds...)...), nil, 0); err != nil {
		unix.Close(pair[0])
		return -1, provider.Wrap(provider.CodeExecFailed, "send exec request", err)
	}
	return pair[0], nil
}
