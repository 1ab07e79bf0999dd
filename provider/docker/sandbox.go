//go:build linux

package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"github.com/moby/profiles/seccomp"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/internal/placeholder"
	"github.com/corral-sandbox/corral/internal/procstat"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Labels every container of Corral's carries (see Sweep).
const (
	LabelSandbox   = "io.corral.sandbox"    // the sandbox id
	LabelPolicy    = "io.corral.policy"     // the policy hash
	LabelOwner     = "io.corral.owner"      // "PID START BOOT PIDNS": the supervisor process (see ownerLabel)
	LabelState     = "io.corral.state-dir"  // host state directory, removed with the container
	LabelVersion   = "io.corral.version"    // the plan's provider name and version of the label scheme
	LabelManaged   = "io.corral.managed-by" // persistent sandboxes: their manager (Sweep leaves them alone)
	labelSchemeVer = "docker/1"
)

// readyTimeout bounds how long Start waits for corral's init.
const readyTimeout = 20 * time.Second

// Sandbox is one container.
type Sandbox struct {
	cli     *client.Client
	plan    *provider.Plan
	spec    *Spec
	id      string // sandbox id (also the container name)
	cid     string // container id
	state   string // host state dir
	control *net.UnixListener
	egress  *net.UnixListener
	// egressPeers serves egress to the container's processes only.
	egressPeers *peerListener
	lifeline    net.Conn // init's connection; closing it stops init
	initPID     int
	oomBase     int // oomKills at Start
	layers      []provider.LayerStatus

	mu      sync.Mutex
	stopped bool

	placeholders *placeholder.Set // absent protected names, held while the container may exist

	slot    *grants.Slot // the host side of the grant slots (Spec.Slots), grants.go
	grants  liveGrants
	consent *consentListener // the consent channel (ShimSpec.ConsentPort), consentchan.go
	// liveInit and liveStart are the init pid currentInit found last and
	// its start time.
	initMu    sync.Mutex
	liveInit  int
	liveStart uint64
}

// stateBase is where per-sandbox state dirs live: /run/corral/docker as
// root, else $XDG_RUNTIME_DIR/corral/docker or /tmp/corral-UID/docker.
func stateBase() string {
	if os.Getuid() == 0 {
		return "/run/corral/docker"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "corral", "docker")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("corral-%d", os.Getuid()), "docker")
}

// managedBase is where persistent sandboxes' state dirs live, beside
// stateBase (Sweep does not look there: their manager reconciles them).
func managedBase() string { return filepath.Join(filepath.Dir(stateBase()), "docker-managed") }

// makeStateBase creates base's own components (those below /run,
// $XDG_RUNTIME_DIR or /tmp) and checks each is a real directory owned by
// this uid that nobody else can write: no one may swap a sandbox's state
// dir (its mask sources, its sockets) between Provision and Start.
func makeStateBase(base string) (string, error) {
	var parts []string
	for d := base; ; d = filepath.Dir(d) {
		if d == "/run" || d == os.Getenv("XDG_RUNTIME_DIR") || d == filepath.Clean(os.TempDir()) || d == "/" {
			break
		}
		parts = append([]string{d}, parts...)
	}
	for _, d := range parts {
		mode := os.FileMode(0o755)
		if os.Getuid() != 0 {
			mode = 0o700
		}
		if err := os.Mkdir(d, mode); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return "", err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
			return "", fmt.Errorf("state directory %s is not a directory of uid %d that only it can write (mode %o, owner %d): remove it", d, os.Getuid(), st.Mode&0o7777, st.Uid)
		}
	}
	return base, nil
}

// Provision creates the state dir (spec, mask sources, the sockets) and
// the container, without starting it. Containers of dead supervisors are
// swept first.
func (p *Provider) Provision(ctx context.Context, plan *provider.Plan, opts provider.ProvisionOptions) (provider.Sandbox, error) {
	if plan.Loss.HasErrors() {
		return nil, provider.Rejected(plan.Loss)
	}
	if opts.Persistent && opts.Owner == "" {
		// Its owner label is what tells it from a per-run container:
		// without one, Sweep would remove it once this process ended and
		// Recover would not know it.
		return nil, provider.Errorf(provider.CodeUnavailable, "docker: a persistent sandbox needs an owner (ProvisionOptions.Owner)")
	}
	h := p.facts()
	if h.err != nil {
		return nil, provider.Wrap(provider.CodeUnavailable, "docker", h.err)
	}
	spec, ok := plan.Details.(*Spec)
	if !ok {
		return nil, provider.Errorf(provider.CodeInternal, "docker: plan details are %T", plan.Details)
	}
	_, _ = p.Sweep(ctx) // best effort: leftovers of killed runs
	id := provider.NewID()
	if opts.ID != "" {
		if !sandboxID().MatchString(opts.ID) {
			return nil, provider.Errorf(provider.CodeInternal, "docker: sandbox id %q is not of NewID's shape", opts.ID)
		}
		id = opts.ID
	}
	cp := *spec // the plan stays as mapped
	cp.ID, cp.Persistent, cp.ManagedBy = id, opts.Persistent, opts.Owner
	if len(opts.Trust) == 0 {
		cp.Trust, cp.Store = nil, nil // the caller gave no bundle: nothing to bind
	}
	cp.Shim.Persistent = opts.Persistent
	spec = &cp
	s := &Sandbox{cli: h.cli, plan: plan, spec: spec, id: id}
	fail := func(err error) (provider.Sandbox, error) {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Deprovision(c)
		return nil, provider.Wrap(provider.CodeProvisionFailed, "docker", err)
	}
	if f := os.Getenv(provider.FaultEnv); f != "" {
		spec.Shim.FaultLayer = f
		spec.Cgroups = spec.Cgroups && f != string(policy.LayerCgroups)
	}
	if err := s.prepareState(opts.Trust, opts.TrustStore); err != nil {
		return fail(err)
	}
	// Before the container is created: its binds mount them read-only.
	ph, err := placeholder.Acquire(plan.Policy)
	if err != nil {
		return fail(err)
	}
	s.placeholders = ph
	cfg, hcfg, err := s.containerConfig(h.bin)
	if err != nil {
		return fail(err)
	}
	res, err := h.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: s.id, Config: cfg, HostConfig: hcfg})
	if err != nil {
		s.cid = s.id // the daemon may have created it all the same: removed by name
		return fail(fmt.Errorf("create container: %w", err))
	}
	s.cid = res.ID
	return s, nil
}

// prepareState makes the state dir: the CA bundle and Java store (trust
// and store, when the policy inspects egress: addTrust), the credentials'
// files (addCredentials), the empty mask
// sources and the
// listening sockets. The dir is 0755 and its sockets 0666 so the workload's
// uid reaches them through the container's read-only bind; who connects is
// checked (peer credentials, see Start and peerListener).
func (s *Sandbox) prepareState(trust, store []byte) error {
	base := stateBase()
	if s.spec.Persistent {
		base = managedBase()
	}
	base, err := makeStateBase(base)
	if err != nil {
		return err
	}
	state := filepath.Join(base, s.id)
	if err := os.Mkdir(state, 0o755); err != nil {
		return err
	}
	s.state = state
	// Who made it, for Sweep: a state dir can outlive its container (a
	// corral killed before it created one).
	if err := os.WriteFile(filepath.Join(state, "owner"), []byte(ownerLabel(os.Getpid())), 0o644); err != nil {
		return err
	}
	if len(trust) > 0 {
		if err := s.addTrust(trust, store); err != nil {
			return err
		}
	}
	if err := s.addCredentials(); err != nil {
		return err
	}
	if s.spec.Persistent { // for Recover, by a later process
		data, err := json.Marshal(savedPlan{Spec: s.spec, Layers: s.plan.Layers})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(state, "plan.json"), data, 0o600); err != nil {
			return err
		}
	}
	// Mask sources: made here, fresh (O_EXCL, in a dir just created),
	// empty and mode 000, never a path inside the image.
	masks := filepath.Join(s.state, "masks")
	if err := os.Mkdir(masks, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(masks, "dir"), 0o000); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(masks, "file"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o000)
	if err != nil {
		return err
	}
	f.Close()
	if err := verifyEmpty(masks); err != nil {
		return err
	}
	listen := func(name string) (*net.UnixListener, error) {
		path := filepath.Join(s.state, name)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return nil, err
		}
		return l, os.Chmod(path, 0o666)
	}
	if s.control, err = listen("control.sock"); err != nil {
		return err
	}
	if s.spec.Shim.ProxyPort != 0 {
		if s.egress, err = listen("egress.sock"); err != nil {
			return err
		}
	}
	if s.spec.Shim.ConsentPort != 0 {
		l, err := listen("consent.sock")
		if err != nil {
			return err
		}
		s.consent = newConsentListener(l, s.isInit)
	}
	if s.spec.Slots {
		return s.mountSlot()
	}
	return nil
}

// verifyEmpty checks the mask sources: a directory with no entries and an
// empty regular file, both mode 000 and owned by this process's uid.
func verifyEmpty(masks string) error {
	for name, dir := range map[string]bool{"dir": true, "file": false} {
		p := filepath.Join(masks, name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if isDir != dir || (!dir && st.Mode&unix.S_IFMT != unix.S_IFREG) || st.Mode&0o7777 != 0 || int(st.Uid) != os.Getuid() || (!dir && st.Size != 0) {
			return fmt.Errorf("mask source %s is not what corral made (mode %o, uid %d, size %d)", p, st.Mode, st.Uid, st.Size)
		}
		if dir {
			if ents, err := os.ReadDir(p); err != nil && !errors.Is(err, os.ErrPermission) || len(ents) > 0 {
				return fmt.Errorf("mask source %s is not empty", p)
			}
		}
	}
	return nil
}

// containerConfig is the container: secure defaults plus the plan.
func (s *Sandbox) containerConfig(bin string) (*container.Config, *container.HostConfig, error) {
	sp := s.spec
	prof := seccomp.DefaultProfile()
	profJSON, err := json.Marshal(prof)
	if err != nil {
		return nil, nil, err
	}
	shim, err := json.Marshal(sp.Shim)
	if err != nil {
		return nil, nil, err
	}
	image := sp.Image
	if sp.ImageID != "" {
		image = sp.ImageID // the image Map checked, even if the tag moved since
	}
	cfg := &container.Config{
		Image:      image,
		Hostname:   sp.Hostname,
		User:       fmt.Sprintf("%d:%d", sp.UID, sp.GID),
		Env:        sp.Env,
		WorkingDir: sp.Workdir,
		Entrypoint: []string{BinPath, InitArg, string(shim)},
		Cmd:        []string{},
		// An image's HEALTHCHECK would be exec'd without corral's shim.
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
		Labels: map[string]string{
			LabelSandbox: s.id,
			LabelPolicy:  sp.PolicyHash,
			LabelOwner:   ownerLabel(os.Getpid()),
			LabelState:   s.state,
			LabelVersion: labelSchemeVer,
			LabelManaged: sp.ManagedBy,
		},
		StopSignal: "SIGKILL",
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(sp.Network),
		IpcMode:        container.IPCModePrivate,
		PidMode:        "",
		UTSMode:        "",
		CgroupnsMode:   container.CgroupnsModePrivate,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true", "seccomp=" + string(profJSON)},
		Privileged:     false,
		ShmSize:        sp.ShmSize,
		Tmpfs:          map[string]string{},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: bin, Target: BinPath, ReadOnly: true, BindOptions: &mount.BindOptions{NonRecursive: true}},
			{Type: mount.TypeBind, Source: s.state, Target: RunDir, ReadOnly: true, BindOptions: &mount.BindOptions{NonRecursive: true}},
		},
	}
	if sp.Cgroups {
		hc.Resources = container.Resources{Memory: sp.Memory, NanoCPUs: sp.NanoCPUs}
		if sp.Memory > 0 {
			hc.Resources.MemorySwap = sp.Memory // memory+swap = memory: no swap
		}
		if sp.Pids > 0 {
			pids := sp.Pids
			hc.Resources.PidsLimit = &pids
		}
	}
	if sp.Shim.Nofile > 0 {
		n := int64(sp.Shim.Nofile)
		hc.Resources.Ulimits = append(hc.Resources.Ulimits, &container.Ulimit{Name: "nofile", Soft: n, Hard: n})
	}
	hc.Resources.Ulimits = append(hc.Resources.Ulimits, &container.Ulimit{Name: "core", Soft: 0, Hard: 0})
	for _, t := range sp.Tmpfs {
		opts := fmt.Sprintf("rw,exec,nosuid,nodev,mode=%o", t.Mode) // exec: Docker's default is noexec; the linux provider allows it too
		if t.Mode&0o1000 == 0 {                                     // private: owned by the workload
			opts += fmt.Sprintf(",uid=%d,gid=%d", sp.UID, sp.GID)
		}
		if t.Size > 0 {
			opts += fmt.Sprintf(",size=%dk", (t.Size+1023)/1024)
		}
		hc.Tmpfs[t.Path] = opts
	}
	for _, b := range sp.Binds {
		src := b.Source
		if b.Mask {
			src = filepath.Join(s.state, "masks", "file")
			if b.Dir {
				src = filepath.Join(s.state, "masks", "dir")
			}
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: b.Target, ReadOnly: b.ReadOnly,
			BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRPrivate}})
	}
	if sp.Slots {
		// rslave: grants mounted in the host's slot later reach the
		// running container (and a restarted one: the bind is recursive).
		// Read-only at its top only, so the slot's directories cannot
		// change inside while read-write grants below stay writable.
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: slotPath(s.state), Target: provider.GrantSlots, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave, ReadOnlyNonRecursive: true}})
	}
	ours := []*Trust{sp.Trust, sp.Store}
	for i := range sp.Credentials {
		ours = append(ours, &sp.Credentials[i])
	}
	for _, tr := range ours {
		if tr == nil {
			continue
		}
		if tr.Source == "" {
			return nil, nil, provider.Errorf(provider.CodeInternal, "docker: the file for %v was not written", tr.Targets)
		}
		for _, t := range tr.Targets {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: tr.Source, Target: t, ReadOnly: true,
				BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRPrivate}})
		}
	}
	return cfg, hc, nil
}

// ownerLabel is "PID START BOOT PIDNS" for process pid: START its start
// time in clock ticks since boot (proc(5), /proc/PID/stat field 22), so a
// reused pid is not taken for the supervisor; BOOT the kernel's boot id
// (/proc/sys/kernel/random/boot_id), so a reboot ends every owner; PIDNS
// the pid namespace the pid is counted in, so a sweep from another one
// leaves the container alone.
func ownerLabel(pid int) string {
	return fmt.Sprintf("%d %d %s %s", pid, startTime(pid), bootID(), pidNS())
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "-"
	}
	return strings.TrimSpace(string(b))
}

func pidNS() string {
	l, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "-"
	}
	return l
}

// startTime is the process's start time (procstat); 0 when it is gone.
func startTime(pid int) uint64 {
	st, _ := procstat.Read(pid)
	return st.StartTicks
}

func (s *Sandbox) ID() string { return s.id }

// initHello is corral's init's first message on the control socket.
type initHello struct {
	Error    string `json:"error,omitempty"`
	Layer    string `json:"layer,omitempty"`
	Landlock int    `json:"landlock_abi"` // the ABI the shim sees inside (its syscalls pass the profile)
	// Skipped lists optional layers init could not apply: layer -> why.
	Skipped map[string]string `json:"skipped,omitempty"`
}

// Start starts the container and waits for corral's init to report; then
// the layers are verified from outside (see verify).
func (s *Sandbox) Start(ctx context.Context) error {
	if _, err := s.cli.ContainerStart(ctx, s.cid, client.ContainerStartOptions{}); err != nil {
		return provider.Wrap(provider.CodeStartFailed, "docker: start container", err)
	}
	insp, err := s.cli.ContainerInspect(ctx, s.cid, client.ContainerInspectOptions{})
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "docker: inspect", err)
	}
	if insp.Container.State == nil || insp.Container.State.Pid == 0 {
		return provider.Errorf(provider.CodeStartFailed, "docker: the container is not running%s", s.containerEnd())
	}
	s.initPID = insp.Container.State.Pid
	if s.egress != nil {
		s.egressPeers = &peerListener{UnixListener: s.egress, allow: s.inContainer}
	}
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	_ = s.control.SetDeadline(time.Now().Add(readyTimeout))
	go func() {
		// Only corral's init (the container's PID 1, by its host pid) may
		// report: anyone else who reaches the socket is turned away.
		l := peerListener{UnixListener: s.control, allow: func(pid int) bool { return pid == s.initPID }}
		c, err := l.Accept()
		ch <- accepted{c, err}
	}()
	var a accepted
	select {
	case a = <-ch:
	case <-ctx.Done():
		return provider.Wrap(provider.CodeStartFailed, "docker", ctx.Err())
	}
	if a.err != nil {
		return provider.Wrap(provider.CodeStartFailed, "docker: corral's init did not report within "+readyTimeout.String(), fmt.Errorf("%w%s", a.err, s.containerEnd()))
	}
	s.lifeline = a.c
	_ = s.control.Close() // init is the only one it was for; the socket file goes with it
	_ = a.c.SetReadDeadline(time.Now().Add(readyTimeout))
	line, err := bufio.NewReader(a.c).ReadBytes('\n')
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "docker: corral's init", fmt.Errorf("%w%s", err, s.containerEnd()))
	}
	_ = a.c.SetReadDeadline(time.Time{})
	var hello initHello
	if err := json.Unmarshal(line, &hello); err != nil {
		return provider.Wrap(provider.CodeStartFailed, "docker: corral's init", err)
	}
	if hello.Error != "" {
		if hello.Layer != "" {
			return provider.LayerError(provider.CodeStartFailed, hello.Layer, errors.New(hello.Error))
		}
		return provider.Errorf(provider.CodeStartFailed, "docker: corral's init: %s", hello.Error)
	}
	s.oomBase = oomKills(s.initPID)
	layers, err := verify(s.plan.Layers, s.spec, s.initPID, insp.Container.HostConfig, hello)
	s.layers = layers
	if err == nil {
		err = s.verifySlots()
	}
	if err == nil && s.consent != nil {
		s.consent.start()
	}
	return err
}

// containerEnd describes how the container ended, for error messages.
func (s *Sandbox) containerEnd() string {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	insp, err := s.cli.ContainerInspect(c, s.cid, client.ContainerInspectOptions{})
	if err != nil || insp.Container.State == nil || insp.Container.State.Running {
		return ""
	}
	st := insp.Container.State
	msg := fmt.Sprintf(" (the container exited with %d", st.ExitCode)
	if st.Error != "" {
		msg += ": " + st.Error
	}
	if logs, err := s.cli.ContainerLogs(c, s.cid, client.ContainerLogsOptions{ShowStderr: true, ShowStdout: true, Tail: "5"}); err == nil {
		var b strings.Builder
		_, _ = stdcopy.StdCopy(&b, &b, io.LimitReader(logs, 4096))
		logs.Close()
		if t := strings.TrimSpace(b.String()); t != "" {
			msg += "; it said: " + t
		}
	}
	return msg + ")"
}

// execSpec is the shim's spec for an exec: every layer Start found in
// force is required, so the shim fails rather than run the command without
// it.
func (s *Sandbox) execSpec(size client.ConsoleSize) string {
	sh := s.spec.Shim
	sh.Rows, sh.Cols = uint16(size.Height), uint16(size.Width)
	// A gateway's sandbox may serve ports on its own loopback, which only
	// DialServed (corral sandbox forward) reaches.
	sh.Landlock.BindAny = s.spec.Persistent
	for _, l := range s.layers {
		active := l.State == provider.LayerActive
		switch l.Layer {
		case policy.LayerLandlock:
			sh.Landlock.Enabled, sh.Landlock.Required = active, active
		case policy.LayerSeccomp:
			sh.Seccomp, sh.SeccompRequired = active, active
		}
	}
	b, _ := json.Marshal(sh)
	return string(b)
}

// Exec runs spec through corral's shim (which applies Landlock and
// corral's seccomp filter, then executes the command) and waits for it.
// The policy's timeout is enforced here: when it expires the container is
// killed.
func (s *Sandbox) Exec(ctx context.Context, spec provider.ExecSpec) (provider.ExitStatus, error) {
	t0 := time.Now()
	if len(spec.Args) == 0 {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeExecFailed, "no command given")
	}
	if len(spec.ExtraFiles) > 0 {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeExecFailed, "docker: extra file descriptors (--preserve-fds) cannot be passed into a container")
	}
	dir := spec.Dir
	if dir == "" {
		dir = s.spec.Workdir
	}
	var size client.ConsoleSize
	if spec.TTY && spec.Resize != nil {
		select {
		case sz, ok := <-spec.Resize:
			if ok {
				size = client.ConsoleSize{Height: uint(sz[0]), Width: uint(sz[1])}
			}
		default:
		}
	}
	opts := client.ExecCreateOptions{
		User:         fmt.Sprintf("%d:%d", s.spec.UID, s.spec.GID),
		TTY:          spec.TTY,
		AttachStdin:  spec.Stdin != nil,
		AttachStdout: true,
		AttachStderr: !spec.TTY,
		Env:          s.spec.Env,
		WorkingDir:   dir,
		Cmd:          append([]string{BinPath, ExecArg, s.execSpec(size), "--"}, spec.Args...),
		ConsoleSize:  size,
	}
	ex, err := s.cli.ExecCreate(ctx, s.cid, opts)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "docker: exec", err)
	}
	att, err := s.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{TTY: spec.TTY, ConsoleSize: size})
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "docker: exec attach", err)
	}
	defer att.Close()
	execPID := 0
	if spec.Started != nil || s.spec.Persistent {
		// The exec starts with the attach; its pid shows a moment later
		// (and stays once it ended), a busy daemon's much later: up to 2 s.
		for i := 0; i < 400; i++ {
			in, err := s.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
			if err != nil || in.PID != 0 {
				if err == nil {
					execPID = in.PID
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if spec.Started != nil {
			spec.Started(execPID) // 0: the daemon never said; it was launched all the same
		}
	}
	// end kills what must end when the command is cut short: the whole
	// container for a one-shot run, only the command in a persistent
	// sandbox (which lives on for its other commands).
	end := func() {
		if !s.spec.Persistent {
			s.kill()
		} else if execPID > 0 {
			_ = unix.Kill(execPID, unix.SIGKILL)
		}
	}
	if spec.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, spec.Stdin)
			if !spec.TTY { // with a terminal, Docker ends the whole stream on stdin's EOF, output and all
				_ = att.CloseWrite()
			}
		}()
	}
	if spec.TTY && size.Height > 0 {
		// API < 1.42 ignores ConsoleSize: size the terminal now.
		_, _ = s.cli.ExecResize(ctx, ex.ID, client.ExecResizeOptions{Height: size.Height, Width: size.Width})
	}
	if spec.TTY && spec.Resize != nil {
		go func() {
			for sz := range spec.Resize {
				_, _ = s.cli.ExecResize(context.Background(), ex.ID, client.ExecResizeOptions{Height: uint(sz[0]), Width: uint(sz[1])})
			}
		}()
	}
	out := make(chan error, 1)
	go func() {
		stdout, stderr := writerOf(spec.Stdout), writerOf(spec.Stderr)
		var err error
		if spec.TTY {
			_, err = io.Copy(stdout, att.Reader)
		} else {
			_, err = stdcopy.StdCopy(stdout, stderr, att.Reader)
		}
		out <- err
	}()
	var timer <-chan time.Time
	if d := time.Duration(s.spec.Timeout); d > 0 {
		t := time.NewTimer(d - time.Since(t0))
		defer t.Stop()
		timer = t.C
	}
	// The command has ended when the daemon says so, not when its output
	// does: a background child can hold stdout open, or the command can
	// close it and go on. Poll, more slowly as time passes.
	var in client.ExecInspectResult
	streamDone := false
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		select {
		case <-out:
			streamDone, out = true, nil
			wait = 5 * time.Millisecond
		case <-time.After(wait):
		case <-timer:
			end()
			return provider.TimedOutStatus(time.Since(t0)), nil
		case <-ctx.Done():
			end()
			return provider.CancelledStatus(time.Since(t0), ctx.Err())
		}
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		in, err = s.cli.ExecInspect(c, ex.ID, client.ExecInspectOptions{})
		cancel()
		if err != nil {
			return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "docker: exec inspect", err)
		}
		if !in.Running {
			break
		}
	}
	if !streamDone { // let the last output through, if the stream is still open because a child holds it
		select {
		case <-out:
		case <-time.After(200 * time.Millisecond):
		}
	}
	st := provider.ExitStatus{Code: in.ExitCode, Duration: time.Since(t0)}
	st.Reason = s.oomReason()
	return st, nil
}

func writerOf(f *os.File) io.Writer {
	if f == nil {
		return io.Discard
	}
	return f
}

// oomReason says so when the kernel's OOM killer acted in the
// container's cgroup during the run (read from the host's cgroupfs).
func (s *Sandbox) oomReason() string {
	if n := oomKills(s.initPID); n > s.oomBase && s.oomBase >= 0 {
		return fmt.Sprintf("the kernel's OOM killer killed %d process(es) in the container: the memory limit (%s) was reached", n-s.oomBase, policy.ByteSize(s.spec.Memory))
	}
	return ""
}

// Signal forwards sig to corral's init, which sends it to every process
// inside.
func (s *Sandbox) Signal(sig os.Signal) error {
	ss, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("docker: unsupported signal %v", sig)
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.cli.ContainerKill(c, s.cid, client.ContainerKillOptions{Signal: strconv.Itoa(int(ss))})
	return err
}

// kill kills the container (every process in it) at once.
func (s *Sandbox) kill() {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = s.cli.ContainerKill(c, s.cid, client.ContainerKillOptions{Signal: "SIGKILL"})
}

// Stop kills everything inside; idempotent.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if s.lifeline != nil && !s.spec.Persistent {
		// Init kills everything inside and exits, which ends the
		// container; Deprovision's forced removal covers the rest.
		s.lifeline.Close()
		return nil
	}
	if s.lifeline != nil {
		s.lifeline.Close()
	}
	if s.cid != "" {
		_, err := s.cli.ContainerKill(ctx, s.cid, client.ContainerKillOptions{Signal: "SIGKILL"})
		if err != nil && !isNotRunning(err) {
			return provider.Wrap(provider.CodeStopFailed, "docker: kill", err)
		}
	}
	return nil
}

func isNotRunning(err error) bool {
	return cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "is not running")
}

// Deprovision removes the container and the state dir; idempotent.
func (s *Sandbox) Deprovision(ctx context.Context) error {
	var first error
	if s.cid != "" {
		if _, err := s.cli.ContainerRemove(ctx, s.cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			first = provider.Wrap(provider.CodeStopFailed, "docker: remove container "+s.id, err)
		}
	}
	if first == nil { // never while the container may still have them mounted
		s.placeholders.Release()
	}
	for _, l := range []*net.UnixListener{s.control, s.egress} {
		if l != nil {
			l.Close()
		}
	}
	if s.consent != nil {
		s.consent.Close()
	}
	if s.slot != nil {
		s.slot.Close() // its mounts go with the state dir (removeState)
	}
	if s.state != "" {
		if err := removeState(s.state); err != nil && first == nil {
			first = provider.Wrap(provider.CodeStopFailed, "docker: remove "+s.state, err)
		}
	}
	return first
}

// removeState removes a state dir: every mount in it detached first (its
// grant slot: os.RemoveAll crosses mount points, and would reach the
// folders granted read-write; nothing is removed while one stays), its
// mode-000 mask directory made writable.
func removeState(dir string) error {
	if grants.Mounted(dir) {
		if err := grants.Detach(dir); err != nil {
			return fmt.Errorf("%s keeps a mount, so it is not removed: %w", dir, err)
		}
	}
	_ = os.Chmod(filepath.Join(dir, "masks", "dir"), 0o700)
	return os.RemoveAll(dir)
}

func (s *Sandbox) Layers() []provider.LayerStatus { return s.layers }

// EgressListener is the unix socket corral's init forwards the container's
// 127.0.0.1:ProxyPort to (network proxy); nil otherwise.
func (s *Sandbox) EgressListener() net.Listener {
	if s.egressPeers == nil {
		return nil
	}
	return s.egressPeers
}

// inContainer reports whether host pid is a process of this container: in
// corral's init's PID namespace.
func (s *Sandbox) inContainer(pid int) bool {
	theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	init, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.initPID))
	return err1 == nil && err2 == nil && theirs == init
}

// peerListener accepts only connections whose peer process (SO_PEERCRED,
// its pid as seen from here) allow accepts; others are closed at once.
type peerListener struct {
	*net.UnixListener
	allow func(pid int) bool
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if pid := peerPID(c); pid > 0 && l.allow(pid) {
			return c, nil
		}
		c.Close()
	}
}

// peerPID is the pid of the process at the other end of c (0 if unknown).
func peerPID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil || cred == nil {
		return 0
	}
	return int(cred.Pid)
}

// savedPlan is what Recover needs of a persistent sandbox's plan.
type savedPlan struct {
	Spec   *Spec                  `json:"spec"`
	Layers []provider.LayerStatus `json:"layers"`
}

// persistentState is a persistent sandbox's State: its id (the plan
// is saved in its state dir, root's or the gateway user's, which the
// caller's record cannot redirect).
type persistentState struct {
	ID string `json:"id"`
}

// State is the provider.Persistent state Recover takes.
func (s *Sandbox) State() []byte {
	b, _ := json.Marshal(persistentState{ID: s.id})
	return b
}

// Recover reattaches to a persistent sandbox a previous process made
// (ProvisionOptions.Persistent): it reads the plan saved in its state dir
// (plan is not used: the saved one is what the container enforces), finds
// its running container by name, serves its egress socket again, and
// verifies its layers from outside anew. CodeNotFound when there is no
// such sandbox or its container is not running.
func (p *Provider) Recover(ctx context.Context, _ *provider.Plan, saved []byte) (provider.Sandbox, error) {
	h := p.facts()
	if h.err != nil {
		return nil, provider.Wrap(provider.CodeUnavailable, "docker", h.err)
	}
	var ps persistentState
	if err := json.Unmarshal(saved, &ps); err != nil {
		return nil, provider.Wrap(provider.CodeInternal, "docker: recover state (not the state this provider gave: nothing is known of the sandbox)", err)
	}
	id := ps.ID
	if !sandboxID().MatchString(id) {
		return nil, provider.Errorf(provider.CodeNotFound, "docker: %q is not a sandbox id", id)
	}
	state := filepath.Join(managedBase(), id)
	data, err := os.ReadFile(filepath.Join(state, "plan.json"))
	if err != nil {
		code := provider.CodeUnavailable // unreadable (EACCES, EIO): nothing is known
		if errors.Is(err, fs.ErrNotExist) {
			code = provider.CodeNotFound
		}
		return nil, provider.Wrap(code, "docker sandbox "+id+": saved plan", err)
	}
	var sp savedPlan
	if err := json.Unmarshal(data, &sp); err != nil || sp.Spec == nil {
		if err == nil {
			err = errors.New("no spec")
		}
		return nil, provider.Wrap(provider.CodeNotFound, "docker sandbox "+id+": saved plan", err)
	}
	insp, err := h.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		code := provider.CodeUnavailable // the daemon did not answer: nothing is known
		if cerrdefs.IsNotFound(err) {
			code = provider.CodeNotFound
		}
		return nil, provider.Wrap(code, "docker sandbox "+id, err)
	}
	c := insp.Container
	if c.Config == nil || c.Config.Labels[LabelSandbox] != id || c.Config.Labels[LabelManaged] == "" {
		return nil, provider.Errorf(provider.CodeNotFound, "docker sandbox %s: the container is not a persistent corral sandbox", id)
	}
	if c.State == nil || !c.State.Running || c.State.Pid == 0 {
		return nil, provider.Errorf(provider.CodeNotFound, "docker sandbox %s: its container is not running", id)
	}
	s := &Sandbox{cli: h.cli, plan: &provider.Plan{Provider: Name, Layers: sp.Layers, Details: sp.Spec}, spec: sp.Spec,
		id: id, cid: c.ID, state: state, initPID: c.State.Pid}
	s.oomBase = oomKills(s.initPID)
	if sp.Spec.Shim.ProxyPort != 0 {
		path := filepath.Join(state, "egress.sock")
		_ = os.Remove(path) // the previous process's
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return nil, provider.Wrap(provider.CodeStartFailed, "docker sandbox "+id+": egress socket", err)
		}
		if err := os.Chmod(path, 0o666); err != nil {
			l.Close()
			return nil, provider.Wrap(provider.CodeStartFailed, "docker sandbox "+id+": egress socket", err)
		}
		s.egress = l
		s.egressPeers = &peerListener{UnixListener: l, allow: s.inContainer}
	}
	if sp.Spec.Shim.ConsentPort != 0 {
		path := filepath.Join(state, "consent.sock")
		_ = os.Remove(path) // the previous process's
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			err = os.Chmod(path, 0o666)
		}
		if err != nil {
			if l != nil {
				l.Close()
			}
			if s.egress != nil {
				s.egress.Close()
			}
			return nil, provider.Wrap(provider.CodeStartFailed, "docker sandbox "+id+": consent socket", err)
		}
		s.consent = newConsentListener(l, s.isInit)
		s.consent.start()
	}
	// Init checked Landlock inside when it started; the host's ABI is what
	// the shim will find now.
	layers, err := verify(sp.Layers, sp.Spec, s.initPID, c.HostConfig, initHello{Landlock: landlock.ABI()})
	s.layers = layers
	if err == nil {
		err = s.recoverSlot()
	}
	if err == nil {
		err = s.verifySlots()
	}
	if err == nil {
		// Held again, so that no other run removes them under this
		// container; one already gone was removed while mounted here,
		// which detached the mount: the protection is not in force.
		s.placeholders, err = placeholder.Acquire(heldPaths(sp.Spec))
		if gone := s.placeholders.Made(); err == nil && len(gone) > 0 {
			err = provider.LayerError(provider.CodeStartFailed, "mounts", fmt.Errorf("docker sandbox %s: placeholders %s were removed while the gateway was down, so the workload can create those names: recreate the sandbox", id, strings.Join(gone, ", ")))
		}
	}
	if err != nil {
		s.placeholders.Close() // the container may still have them mounted
		if s.egress != nil {
			s.egress.Close()
		}
		if s.consent != nil {
			s.consent.Close()
		}
		if s.slot != nil {
			s.slot.Close()
		}
		return nil, err
	}
	return s, nil
}

// Destroy removes a persistent sandbox's container, the placeholders it
// had mounted (unless another run holds them) and its state dir by id,
// whatever state they are in (idempotent: nothing there is not an error).
func (p *Provider) Destroy(ctx context.Context, id string) error {
	h := p.facts()
	if h.err != nil {
		return provider.Wrap(provider.CodeUnavailable, "docker", h.err)
	}
	if !sandboxID().MatchString(id) {
		return provider.Errorf(provider.CodeNotFound, "docker: %q is not a sandbox id", id)
	}
	state := filepath.Join(managedBase(), id)
	var sp savedPlan
	if data, err := os.ReadFile(filepath.Join(state, "plan.json")); err == nil {
		_ = json.Unmarshal(data, &sp)
	}
	if _, err := h.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return provider.Wrap(provider.CodeStopFailed, "docker: remove "+id, err)
	}
	if sp.Spec != nil {
		// The placeholders its container had mounted: a process that
		// held them may be gone (a gateway that crashed), so they are
		// adopted and released, which removes each no other run holds.
		held := heldPaths(sp.Spec)
		for _, ph := range held.Placeholders {
			if set, err := placeholder.Acquire(&policy.Resolved{Placeholders: []policy.Placeholder{ph}}); err == nil {
				set.Release()
			}
		}
	}
	if err := removeState(state); err != nil {
		return provider.Wrap(provider.CodeStopFailed, "docker: remove state of "+id, err)
	}
	return nil
}

// Managed lists the ids of the persistent sandboxes whose manager is
// manager (label io.corral.managed-by), running or not.
func (p *Provider) Managed(ctx context.Context, manager string) ([]string, error) {
	h := p.facts()
	if h.err != nil {
		return nil, provider.Wrap(provider.CodeUnavailable, "docker", h.err)
	}
	list, err := h.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelManaged+"="+manager)})
	if err != nil {
		return nil, provider.Wrap(provider.CodeUnavailable, "docker: list containers", err)
	}
	var ids []string
	for _, c := range list.Items {
		if id := c.Labels[LabelSandbox]; sandboxID().MatchString(id) && slices.Contains(c.Names, "/"+id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Running reports whether the sandbox's container runs now (the daemon's
// word, checked against its init's pid on the host).
func (s *Sandbox) Running(ctx context.Context) bool {
	insp, err := s.cli.ContainerInspect(ctx, s.cid, client.ContainerInspectOptions{})
	if err != nil || insp.Container.State == nil || !insp.Container.State.Running {
		return false
	}
	_, err = os.Stat(fmt.Sprintf("/proc/%d", insp.Container.State.Pid))
	return err == nil && insp.Container.State.Pid == s.initPID
}
