//go:build linux

package linux

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/placeholder"
	"github.com/corral-sandbox/corral/internal/startup"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux/cgroup"
)

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// FaultEnv is provider.FaultEnv.
const FaultEnv = provider.FaultEnv

// Sandbox is one Linux sandbox: a cgroup, and an init process in fresh
// namespaces reached over a control socket.
type Sandbox struct {
	id     string
	plan   *provider.Plan
	spec   *InitSpec
	cg     *cgroup.Group
	layers []provider.LayerStatus

	cgDone chan struct{} // closed when the cgroup is created (or failed)
	cgErr  error
	swept  chan struct{} // closed when the sweep of stale cgroups is done

	cmd     *exec.Cmd
	ctl     *os.File
	initPID int
	exited  chan struct{} // closed when init has been reaped
	egress  net.Listener  // network proxy: the listener inside the sandbox
	consent net.Listener  // the consent channel's listener inside (ConsentPort), or nil
	execd   atomic.Bool   // Exec was called: init runs one workload

	sockMu  sync.Mutex
	sockets *os.File // InitSpec.serves: init's socket factory (socketFactory)

	placeholders *placeholder.Set // absent protected names, held from Provision to Deprovision
	phDone       chan struct{}    // closed when placeholders are taken (or failed: phErr)
	phErr        error

	stateDir  string // a per-run sandbox's state directory, holding its trust and credential files; removed by Deprovision
	slotDir   string // where the slot holder mounts its slot (slot/, stage/ below it): the sandbox's state directory
	slots     *slotHolder
	live      liveGrants // the folder grants made (grants_linux.go)
	trustPath string     // where the CA bundle is inside (init's report), for WithTrustEnv
	storeAt   []string   // where the Java trust store is inside (init's report), for WithTrustEnv
}

// EgressListener returns the listener the egress proxy must serve (network
// proxy), or nil. It lives in the sandbox's network namespace at
// 127.0.0.1:ProxyPort; the sandbox has no other way out.
func (s *Sandbox) EgressListener() net.Listener { return s.egress }

// Provision creates the sandbox's cgroup. Nothing runs yet. A per-run
// sandbox (the default) ends with this process; opts.Persistent gives one
// whose own supervisor outlives it (provisionPersistent).
func (p *Provider) Provision(ctx context.Context, plan *provider.Plan, opts provider.ProvisionOptions) (provider.Sandbox, error) {
	if plan.Loss.HasErrors() {
		return nil, provider.Rejected(plan.Loss)
	}
	spec, ok := plan.Details.(*InitSpec)
	if !ok {
		return nil, provider.Errorf(provider.CodeInternal, "plan is not a linux plan")
	}
	if opts.Persistent {
		return provisionPersistent(plan, spec, opts)
	}
	if opts.ID != "" || opts.Owner != "" {
		// Its id names its cgroup, run-PID-..., which the sweep of
		// stale ones reads.
		return nil, provider.Errorf(provider.CodeUnavailable, "linux: a per-run sandbox's id is its supervisor's, and it has no owner")
	}
	spec.FaultLayer = os.Getenv(FaultEnv)
	spec.DropLayer = testDropLayer()
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	id := fmt.Sprintf("run-%d-%s", os.Getpid(), hex.EncodeToString(rb[:]))
	dir := ""
	if len(opts.Trust) > 0 || hasCredentialFiles(plan.Policy) || spec.slots() || spec.ConsentPort != 0 {
		var err error
		if dir, err = runTrustDir(plan.Policy, id); err != nil {
			return nil, err
		}
		if spec, err = stateFiles(spec, plan.Policy, dir, opts); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	sb, err := newSandbox(plan, spec, id)
	if err != nil {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	sb.stateDir, sb.slotDir = dir, dir
	return sb, nil
}

// newSandbox is sandbox id for plan, its placeholders and its cgroup
// (named id) being made.
func newSandbox(plan *provider.Plan, spec *InitSpec, id string) (*Sandbox, error) {
	sb := &Sandbox{id: id, plan: plan, spec: spec}
	sb.layers = append([]provider.LayerStatus(nil), plan.Layers...)
	// Taken while init is cloned and starts; Start waits for them
	// (placeholdersReady) before it clones the binds it sends init, which
	// binds them read-only.
	sb.phDone = make(chan struct{})
	go func() {
		defer close(sb.phDone)
		ph, err := placeholder.Acquire(plan.Policy)
		if err != nil {
			sb.phErr = provider.LayerError(provider.CodeProvisionFailed, "mounts", err)
			return
		}
		sb.placeholders = ph
		startup.Add("supervisor", "linux: placeholders taken (in the background)")
	}()
	if spec.Cgroup {
		// Created in the background while init is cloned and starts;
		// Start waits for it (cgroupReady) before anything can run.
		sb.cgDone, sb.swept = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sb.swept)
			func() {
				defer close(sb.cgDone)
				if spec.FaultLayer == string(policy.LayerCgroups) {
					sb.cgErr = errors.New("fault injected (" + FaultEnv + "=cgroups)")
					return
				}
				lim := plan.Policy.Limits
				sb.cg, sb.cgErr = cgroup.New(sb.id, cgroup.Limits{MemoryBytes: int64(lim.Memory), Pids: lim.Pids, CPUCores: lim.CPU})
				startup.Add("supervisor", "linux: cgroup made (in the background)")
			}()
			// Then, off the critical path, remove what SIGKILLed runs
			// left behind.
			_, _ = cgroup.Sweep()
			startup.Add("supervisor", "linux: stale cgroups swept (in the background)")
		}()
	}
	return sb, nil
}

func (s *Sandbox) ID() string { return s.id }

// placeholdersReady waits for the placeholders newSandbox takes.
func (s *Sandbox) placeholdersReady() error {
	<-s.phDone
	return s.phErr
}

// cgroupReady waits for the cgroup Provision started. A failure is fatal
// when the layer is required; when it is optional the layer is skipped.
func (s *Sandbox) cgroupReady() error {
	if s.cgDone == nil {
		return nil
	}
	<-s.cgDone
	if s.cgErr != nil && s.cg == nil {
		if s.spec.Layers[policy.LayerCgroups] != policy.Optional {
			return provider.LayerError(provider.CodeProvisionFailed, "cgroups", s.cgErr)
		}
		s.setLayer(policy.LayerCgroups, provider.LayerSkipped, s.cgErr.Error())
		s.cgErr = nil
	}
	return nil
}

func (s *Sandbox) setLayer(l policy.Layer, st provider.LayerState, detail string) {
	for i := range s.layers {
		if s.layers[i].Layer == l {
			s.layers[i].State, s.layers[i].Detail = st, detail
		}
	}
}

// Layers returns the layers in force, as verified after Start.
func (s *Sandbox) Layers() []provider.LayerStatus { return s.layers }

// Start launches init in new namespaces, places it in the cgroup, sends the
// spec and waits until every layer is applied (or one failed).
func (s *Sandbox) Start(ctx context.Context) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return provider.Wrap(provider.CodeStartFailed, "control socket", err)
	}
	s.ctl = os.NewFile(uintptr(fds[0]), "corral-ctl")
	child := os.NewFile(uintptr(fds[1]), "corral-ctl-init")
	defer child.Close()

	uid, gid := s.spec.UID, s.spec.GID
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP)
	if s.spec.NewNet {
		flags |= unix.CLONE_NEWNET
	}
	attr := &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		Credential:                 &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true},
		// Just what init needs to build the sandbox; all dropped before the
		// workload runs.
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_NET_ADMIN},
		Pdeathsig:   syscall.SIGKILL,
	}
	if os.Getuid() == 0 {
		// Drop the caller's supplementary groups (root's group 0 among
		// them): they would still count in permission checks inside.
		attr.GidMappingsEnableSetgroups = true
		attr.Credential.NoSetGroups = false
		attr.Credential.Groups = []uint32{}
	} else if uid != os.Getuid() || gid != os.Getgid() {
		// An unprivileged caller may only map its own ids and must not
		// call setgroups (user_namespaces(7)), so its own supplementary
		// groups stay: they are the caller's anyway.
		return provider.Errorf(provider.CodeStartFailed, "cannot map uid %d as uid %d", uid, os.Getuid())
	}
	if cgroup.Probe().Version == 2 {
		// v2: init is cloned straight into the cgroup (CLONE_INTO_CGROUP).
		if err := s.cgroupReady(); err != nil {
			return err
		}
		if s.cg != nil {
			if fd, ok := s.cg.FD(); ok {
				attr.UseCgroupFD, attr.CgroupFD = true, fd
			}
		}
	}
	extra := []*os.File{child}
	if s.spec.serves() {
		sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return provider.Wrap(provider.CodeStartFailed, "socket factory", err)
		}
		s.sockets = os.NewFile(uintptr(sp[0]), "corral-sockets")
		theirs := os.NewFile(uintptr(sp[1]), "corral-sockets-init")
		defer theirs.Close()
		extra = append(extra, theirs)
	}
	s.cmd = &exec.Cmd{
		Args:        []string{"corral-init", InitArg},
		Env:         []string{},
		ExtraFiles:  extra,
		SysProcAttr: attr,
	}
	if why := initCmd(s.cmd); why == "" {
		startup.Add("supervisor", "linux: the embedded init is ready")
	} else {
		startup.Add("supervisor", "linux: init is corral's own binary: "+why)
	}
	s.exited = make(chan struct{})
	started := make(chan error, 1)
	// Pdeathsig fires when the thread that forked exits, so that thread
	// stays locked until init is gone.
	startup.Add("supervisor", "linux: init's clone set up")
	go func() {
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			close(s.exited)
			return
		}
		startup.Add("supervisor", "linux: init cloned and exec'd")
		started <- nil
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	// Prepare the fds init needs while the clone runs.
	idfds, ferr := s.initFDs(uid, gid)
	defer func() {
		for _, fd := range idfds {
			unix.Close(fd)
		}
	}()
	startup.Add("supervisor", "linux: id-mapped mounts opened")
	serr := <-started
	// Init has its own copies now: with ours closed, an init that dies
	// before its ready message is EOF to recv, not a wait for ctx.
	child.Close()
	if serr != nil {
		return provider.LayerError(provider.CodeStartFailed, "namespaces", fmt.Errorf("clone: %w", serr))
	}
	s.initPID = s.cmd.Process.Pid
	if ferr != nil {
		return ferr
	}
	var rights []byte
	if len(idfds) > 0 {
		rights = unix.UnixRights(idfds...)
	}
	s.spec.Trace = startup.Enabled()
	b, _ := json.Marshal(s.spec)
	// Env is not serialised in the spec's JSON; it is sent with each exec.
	if err := unix.Sendmsg(int(s.ctl.Fd()), b, rights, nil, 0); err != nil {
		return s.initErr("send spec", err)
	}
	m, err := s.recv(ctx)
	if err != nil {
		return s.initErr("init", err)
	}
	startup.Merge(m.Trace)
	startup.Add("supervisor", "linux: init's ready message received")
	if !m.Ready {
		return &provider.Error{Code: provider.CodeStartFailed, Layer: m.Layer, Msg: m.Error}
	}
	if err := s.listeners(m.fds); err != nil {
		return err
	}
	if hasTrust(s.spec) {
		if len(m.Trust) == 0 {
			return provider.LayerError(provider.CodeStartFailed, "mounts", errors.New("init placed the CA bundle nowhere"))
		}
		s.trustPath, s.storeAt = m.Trust[0], m.Store
	}
	for _, sk := range m.Skipped {
		l, why, _ := strings.Cut(sk, ": ")
		s.setLayer(policy.Layer(l), provider.LayerSkipped, why)
	}
	if m.Landlock != "" {
		// Landlock has no /proc status to check from outside: this is
		// init's report of what landlock_restrict_self accepted.
		s.setLayer(policy.LayerLandlock, provider.LayerActive, m.Landlock+" (reported by init)")
	}
	if err := s.verify(); err != nil {
		return err
	}
	startup.Add("supervisor", "linux: layers verified from outside")
	return s.verifySlots()
}

// initErr is a failure to talk to init while it starts: that it exited
// first, when it did (and how), since that is the cause.
func (s *Sandbox) initErr(what string, err error) error {
	select {
	case <-s.exited:
		return provider.Errorf(provider.CodeStartFailed, "init exited before it reported ready (%v): %s: %v", s.cmd.ProcessState, what, err)
	case <-time.After(100 * time.Millisecond):
	}
	return provider.Wrap(provider.CodeStartFailed, what, err)
}

// listeners takes the listeners init made (its ready message's fds, in
// order): the egress proxy's (ProxyPort), then the consent channel's
// (ConsentPort).
func (s *Sandbox) listeners(fds []int) error {
	take := func(port int, what string) (net.Listener, error) {
		if port == 0 {
			return nil, nil
		}
		if len(fds) == 0 {
			return nil, provider.Errorf(provider.CodeStartFailed, "%s: init sent no listener", what)
		}
		f := os.NewFile(uintptr(fds[0]), what+"-listener")
		fds = fds[1:]
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, provider.Wrap(provider.CodeStartFailed, what, err)
		}
		return l, nil
	}
	var err error
	if s.egress, err = take(s.spec.ProxyPort, "network proxy"); err != nil {
		return err
	}
	if s.consent, err = take(s.spec.ConsentPort, "consent channel"); err != nil {
		return err
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return nil
}

// initFDs returns the fds sent to init with its spec: the clones of the
// preCloned binds (preClones), in order, then (cgroup v1) the "tasks" files that
// init's main thread writes to join the cgroup (see joinCgroup; moving the
// whole process from here would wait for an RCU grace period).
func (s *Sandbox) initFDs(uid, gid int) ([]int, error) {
	slot := -1
	if s.spec.slots() {
		var err error
		if s.slots, slot, err = startSlots(s.slotDir); err != nil {
			return nil, provider.LayerError(provider.CodeStartFailed, "mounts", err)
		}
		defer unix.Close(slot)
	}
	// A placeholder may be one of the binds cloned here.
	if err := s.placeholdersReady(); err != nil {
		return nil, err
	}
	fds, err := preClones(s.spec.Mounts, uid, gid, slot)
	if err != nil {
		return nil, provider.LayerError(provider.CodeStartFailed, "mounts", err)
	}
	if err := s.cgroupReady(); err != nil {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, err
	}
	if s.cg == nil {
		return fds, nil
	}
	if _, ok := s.cg.FD(); ok {
		return fds, nil // v2: init is cloned into the cgroup
	}
	for _, dir := range s.cg.Paths() {
		fd, err := unix.Open(filepath.Join(dir, "tasks"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, provider.LayerError(provider.CodeStartFailed, "cgroups", err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// recv reads one message from init, giving up when ctx ends or init dies.
func (s *Sandbox) recv(ctx context.Context) (initMsg, error) {
	type res struct {
		m   initMsg
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := recvMsg(int(s.ctl.Fd()))
		ch <- res{m, err}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-ctx.Done():
		return initMsg{}, ctx.Err()
	}
}

// recvMsg reads one message from init on fd, with the fd it carries.
func recvMsg(fd int) (initMsg, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err == nil && n == 0 {
		err = errors.New("init exited without a report")
	}
	var m initMsg
	if err == nil {
		err = json.Unmarshal(buf[:n], &m)
	}
	if fds := rightsOf(oob[:oobn]); len(fds) > 0 {
		m.fd, m.fds = fds[0], fds
	}
	return m, err
}

// verify checks from outside, in /proc/<init>/, that the layers the plan
// says are active really are: namespaces differ from ours, no_new_privs
// and seccomp mode 2 are set, no capability is left, and init sits in the
// cgroup whose limits read back as asked. Init's restrictions are inherited
// by everything it starts and cannot be shed.
func (s *Sandbox) verify() error {
	fail := func(l policy.Layer, format string, args ...any) error {
		err := fmt.Errorf(format, args...) // %w keeps a cause
		if s.spec.Layers[l] == policy.Optional {
			s.setLayer(l, provider.LayerSkipped, "verification failed: "+err.Error())
			return nil
		}
		return &provider.Error{Code: provider.CodeStartFailed, Layer: string(l), Msg: "verification failed", Err: err}
	}
	pid := strconv.Itoa(s.initPID)
	differ, shared, err := Namespaces(s.initPID, s.spec.NewNet)
	if err != nil {
		return fail(policy.LayerNamespaces, "%w", err)
	}
	if len(shared) > 0 {
		return fail(policy.LayerNamespaces, "%s namespace is the host's", shared[0])
	}
	s.setLayer(policy.LayerNamespaces, provider.LayerActive, "own "+strings.Join(differ, ", ")+" namespaces (checked in /proc/"+pid+"/ns)")
	fields, err := ProcStatus(s.initPID)
	if err != nil {
		return fail(policy.LayerNamespaces, "read status: %w", err)
	}
	if os.Getuid() == 0 && fields["Groups"] != "" {
		return fail(policy.LayerNamespaces, "supplementary groups %q reached the sandbox", fields["Groups"])
	}
	if held := HeldCapabilities(fields); len(held) > 0 {
		return fail(policy.LayerNamespaces, "%s, want no capabilities", strings.Join(held, " "))
	}
	if fields["NoNewPrivs"] != "1" {
		return fail(policy.LayerNamespaces, "NoNewPrivs is %q", fields["NoNewPrivs"])
	}
	// Each remaining check stands alone: an optional layer that fails
	// verification is marked skipped and the others are still checked.
	if s.spec.Seccomp && provider.StateOf(s.layers, policy.LayerSeccomp) == provider.LayerActive && !(testHooks && s.spec.DropLayer == string(policy.LayerSeccomp)) {
		if fields["Seccomp"] != "2" {
			if err := fail(policy.LayerSeccomp, "Seccomp mode is %q, want 2 (filter)", fields["Seccomp"]); err != nil {
				return err
			}
		} else {
			s.setLayer(policy.LayerSeccomp, provider.LayerActive, "Seccomp: 2, NoNewPrivs: 1, no capabilities (checked in /proc/"+pid+"/status)")
		}
	}
	if provider.StateOf(s.layers, policy.LayerMounts) == provider.LayerActive {
		mi, err := os.ReadFile("/proc/" + pid + "/mountinfo")
		if err != nil {
			return fail(policy.LayerMounts, "read mountinfo: %w", err)
		}
		if !RootIsCorral(string(mi)) {
			return fail(policy.LayerMounts, "root of the sandbox is not corral's tmpfs")
		}
		s.setLayer(policy.LayerMounts, provider.LayerActive, fmt.Sprintf("%d mounts under a private read-only root (checked in /proc/%s/mountinfo)", strings.Count(string(mi), "\n"), pid))
	}
	if s.cg != nil && provider.StateOf(s.layers, policy.LayerCgroups) == provider.LayerActive {
		if detail, msg := s.verifyCgroup(); msg != "" {
			return fail(policy.LayerCgroups, "%s", msg)
		} else {
			s.setLayer(policy.LayerCgroups, provider.LayerActive, detail)
		}
	}
	return nil
}

// verifyCgroup reads the limits back and checks init is a member. It
// returns the evidence, or a message saying what is wrong.
func (s *Sandbox) verifyCgroup() (detail, msg string) {
	ev, err := s.cg.Verify()
	if err != nil {
		return "", err.Error()
	}
	procs, _ := s.cg.Procs()
	if !slices.Contains(procs, s.initPID) {
		return "", fmt.Sprintf("init %d is not in %s", s.initPID, strings.Join(s.cg.Paths(), ", "))
	}
	keys := make([]string, 0, len(ev))
	for k, v := range ev {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return strings.Join(keys, " ") + " (read back from the cgroup files)", ""
}

// RootIsCorral reports whether the mount at "/" in a mountinfo is the
// tmpfs Corral made (source "corral-root").
func RootIsCorral(mountinfo string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != "/" {
			continue
		}
		for i, x := range f {
			if x == "-" && i+2 < len(f) {
				return f[i+1] == "tmpfs" && f[i+2] == "corral-root"
			}
		}
	}
	return false
}

// DialServed connects to port on the sandbox's own loopback, where the
// workload listens (InitSpec.ServePorts), with a socket init made in the
// sandbox's network namespace, giving up after timeout. Errors are the
// connect's (ECONNREFUSED while nothing listens).
func (s *Sandbox) DialServed(port int, timeout time.Duration) (net.Conn, error) {
	if !slices.Contains(s.spec.ServePorts, port) {
		return nil, fmt.Errorf("port %d is not served by sandbox %s", port, s.id)
	}
	f, err := s.dialLoopback(port, timeout)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FileConn(f)
}

// dialLoopback is DialServed for any port (a persistent sandbox's
// supervisor serves its caller's DialServed with it): the connected
// socket.
func (s *Sandbox) dialLoopback(port int, timeout time.Duration) (*os.File, error) {
	s.sockMu.Lock()
	fd, err := func() (int, error) {
		if s.sockets == nil {
			return -1, errors.New("the sandbox is stopped, or serves no ports")
		}
		if _, err := s.sockets.Write([]byte{0}); err != nil {
			return -1, err
		}
		b, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := unix.Recvmsg(int(s.sockets.Fd()), b, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			return -1, err
		}
		fds := rightsOf(oob[:oobn])
		if n != 1 || b[0] != 0 || len(fds) != 1 {
			return -1, errors.New("init made no socket")
		}
		return fds[0], nil
	}()
	s.sockMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: socket factory: %w", s.id, err)
	}
	f := os.NewFile(uintptr(fd), "served")
	if err := connectTimeout(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}, timeout); err != nil {
		f.Close()
		return nil, fmt.Errorf("connect 127.0.0.1:%d in the sandbox: %w", port, err)
	}
	return f, nil
}

// connectTimeout connects fd without blocking longer than timeout: a
// non-blocking connect(2), poll(2) for writability, then SO_ERROR.
func connectTimeout(fd int, sa unix.Sockaddr, timeout time.Duration) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		return err
	}
	err := unix.Connect(fd, sa)
	if err == nil {
		return nil
	}
	if err != unix.EINPROGRESS {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return unix.ETIMEDOUT
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil {
				return err
			} else if soerr != 0 {
				return unix.Errno(soerr)
			}
			return nil
		}
	}
}

// Cgroup returns the sandbox's cgroup directories and the limit files
// written there with their values (full paths), or nothing without one.
func (s *Sandbox) Cgroup() (dirs []string, limits map[string]string) {
	if s.cg == nil {
		return nil, nil
	}
	return s.cg.Paths(), s.cg.Limits()
}

// InitPID is init's pid on the host (valid after Start).
func (s *Sandbox) InitPID() int { return s.initPID }

// Signal forwards sig to the workload (through init).
func (s *Sandbox) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s is not running", s.id)
	}
	return s.cmd.Process.Signal(sig)
}

// Exec runs spec inside and waits for it; a sandbox runs one workload, so
// a second Exec fails. The policy's timeout is enforced here: when it
// expires, the whole sandbox is killed.
func (s *Sandbox) Exec(ctx context.Context, spec provider.ExecSpec) (provider.ExitStatus, error) {
	t0 := time.Now()
	if len(spec.Args) == 0 {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeExecFailed, "no command given")
	}
	if s.execd.Swap(true) {
		return provider.ExitStatus{}, provider.Errorf(provider.CodeExecFailed, "linux: sandbox %s ran its workload already (init runs one)", s.id)
	}
	req := s.request(spec.Args, spec.Dir, spec.TTY)
	req.Ack = spec.Started != nil
	req.Rows, req.Cols = firstSize(spec)
	fds, closeFiles, err := execFiles(spec)
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "", err)
	}
	req.NFiles = len(fds)
	b, _ := json.Marshal(req)
	err = unix.Sendmsg(int(s.ctl.Fd()), b, unix.UnixRights(fds...), nil, 0)
	closeFiles()
	if err != nil {
		return provider.ExitStatus{}, provider.Wrap(provider.CodeExecFailed, "send exec request", err)
	}
	ch := execChannel{
		fd:      int(s.ctl.Fd()),
		spec:    spec,
		timeout: time.Duration(s.plan.Policy.Limits.Timeout),
		hostPID: func(int) int { return s.hostPID() },
		kill:    s.kill,
		died:    func() provider.ExitStatus { return s.initDied(t0) },
		oom:     s.oomReason,
		started: func() {
			if os.Getuid() == 0 {
				// Now that the workload is forked (and cannot inherit
				// it), keep the OOM killer off init: killing it ends the
				// whole sandbox instead of the process that used the
				// memory. Lowering needs CAP_SYS_RESOURCE, so root only.
				_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", s.initPID), []byte("-1000"), 0)
			}
		},
	}
	if req.Ack {
		ch.ack = func() error { return unix.Sendmsg(int(s.ctl.Fd()), []byte("ack"), nil, nil, 0) }
	}
	return runExec(ctx, ch, t0)
}

// request is the exec request for args in dir (empty: the plan's
// workdir), with the sandbox's HOME and environment.
func (s *Sandbox) request(args []string, dir string, tty bool) execRequest {
	if dir == "" {
		dir = s.spec.Workdir
	}
	env := append([]string{"HOME=" + s.spec.Home}, s.spec.Env...)
	if s.trustPath != "" {
		env = provider.WithTrustEnv(env, s.trustPath, s.storeAt)
	}
	return execRequest{Args: args, Dir: dir, Env: env, TTY: tty}
}

// firstSize takes the window size already waiting on spec.Resize (the
// caller's terminal when it asked) for init to set before the process
// starts; later ones reach the pty through attachPTY. None: 0, 0.
func firstSize(spec provider.ExecSpec) (rows, cols uint16) {
	if !spec.TTY || spec.Resize == nil {
		return 0, 0
	}
	select {
	case sz, ok := <-spec.Resize:
		if ok {
			return sz[0], sz[1]
		}
	default:
	}
	return 0, 0
}

// execFiles are the fds an exec's process gets (stdin, stdout, stderr,
// then ExtraFiles; with TTY only ExtraFiles, stdio being the pty), nil
// ones as /dev/null; closeFiles closes what it opened for them.
func execFiles(spec provider.ExecSpec) (fds []int, closeFiles func(), err error) {
	files := append([]*os.File{spec.Stdin, spec.Stdout, spec.Stderr}, spec.ExtraFiles...)
	if spec.TTY {
		files = spec.ExtraFiles // stdio is the pty init creates
	}
	var devnull *os.File
	closeFiles = func() {
		if devnull != nil {
			devnull.Close()
		}
	}
	for _, f := range files {
		if f == nil {
			if devnull == nil {
				if devnull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
					return nil, nil, err
				}
			}
			f = devnull
		}
		fds = append(fds, int(f.Fd()))
	}
	return fds, closeFiles, nil
}

// execChannel is where one exec's process reports to its caller: init's
// control socket (per-run), or the exec's own socket (persistent).
type execChannel struct {
	fd      int
	spec    provider.ExecSpec
	timeout time.Duration // the policy's; 0: none
	// hostPID is the process's host pid from its pid inside.
	hostPID func(nspid int) int
	// started, if set, is called once the process is forked.
	started func()
	// ack, if set, tells init the caller has the pid (init keeps the
	// process unreaped until then); an error kills.
	ack func() error
	// kill ends the process (the timeout expired, ctx ended).
	kill func()
	// died is the status when the channel ends without an exit.
	died func() provider.ExitStatus
	// oom, if set, explains a SIGKILL.
	oom func() string
}

// runExec reads ch until the process exits, calling spec.Started with
// its host pid, attaching a pty when one comes, and killing it when the
// timeout expires or ctx ends.
func runExec(ctx context.Context, ch execChannel, t0 time.Time) (provider.ExitStatus, error) {
	spec := ch.spec
	var timer <-chan time.Time
	if ch.timeout > 0 {
		t := time.NewTimer(ch.timeout)
		defer t.Stop()
		timer = t.C
	}
	var ttyDone <-chan struct{}
	msgs := make(chan initMsg, 2)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(msgs)
		for {
			m, err := recvMsg(ch.fd)
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-done:
				if m.fd > 0 {
					unix.Close(m.fd)
				}
				return
			}
			if m.Exited {
				return
			}
		}
	}()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return ch.died(), nil
			}
			if m.TTY {
				ttyDone = attachPTY(os.NewFile(uintptr(m.fd), "pty-master"), spec)
				continue
			}
			if m.PID != 0 {
				if ch.started != nil {
					ch.started()
				}
				if spec.Started != nil {
					spec.Started(ch.hostPID(m.PID))
				}
				if ch.ack != nil && ch.ack() != nil {
					ch.kill()
				}
			}
			if m.Exited {
				startup.Merge(m.Trace)
				startup.Add("supervisor", "linux: workload's exit received")
				if ttyDone != nil {
					select { // let the last output reach the caller
					case <-ttyDone:
					case <-time.After(2 * time.Second):
					}
				}
				st := provider.ExitStatus{Code: m.Code, Duration: time.Since(t0)}
				if m.Signal != 0 {
					st.Signal = unix.SignalName(syscall.Signal(m.Signal))
				}
				if m.Signal == int(unix.SIGKILL) && ch.oom != nil {
					st.Reason = ch.oom()
				}
				if m.Error != "" {
					return st, provider.Errorf(provider.CodeExecFailed, "%s", m.Error)
				}
				return st, nil
			}
		case <-timer:
			ch.kill()
			return provider.TimedOutStatus(time.Since(t0)), nil
		case <-ctx.Done():
			ch.kill()
			return provider.CancelledStatus(time.Since(t0), ctx.Err())
		}
	}
}

// attachPTY copies the caller's stdin to the pty master and its output to
// stdout, and applies window sizes from spec.Resize. The returned channel
// closes when the output side ends (every holder of the terminal exited).
func attachPTY(master *os.File, spec provider.ExecSpec) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer master.Close()
		if spec.Stdout != nil {
			_, _ = io.Copy(spec.Stdout, master)
		}
	}()
	if spec.Stdin != nil {
		go func() { _, _ = io.Copy(master, spec.Stdin) }()
	}
	if spec.Resize != nil {
		go func() {
			for sz := range spec.Resize {
				_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: sz[0], Col: sz[1]})
			}
		}()
	}
	return done
}

// initDied reports a sandbox whose init ended before the workload did:
// everything inside died with it. The status is init's 128+signal.
func (s *Sandbox) initDied(t0 time.Time) provider.ExitStatus {
	select {
	case <-s.exited:
	case <-time.After(2 * time.Second):
	}
	st := provider.ExitStatus{Code: 128 + int(unix.SIGKILL), Signal: "SIGKILL", Duration: time.Since(t0)}
	how := "SIGKILL"
	if ps := s.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Code, st.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
			how = st.Signal
		} else if ok && ws.Exited() {
			how = fmt.Sprintf("exit status %d", ws.ExitStatus())
		}
	}
	st.Reason = fmt.Sprintf("the sandbox's init ended (%s), and every process inside with it", how)
	if oom := s.oomReason(); oom != "" {
		st.Reason += ": " + oom
	}
	return st
}

// oomReason says so when the kernel's OOM killer acted in the sandbox's
// cgroup (its oom_kill count), else "".
func (s *Sandbox) oomReason() string {
	if s.cg == nil {
		return ""
	}
	if n, err := s.cg.OOMKills(); err == nil && n > 0 {
		return fmt.Sprintf("killed by the kernel's OOM killer: the sandbox reached its memory limit of %s (process.limits.memory)", s.plan.Policy.Limits.Memory)
	}
	return ""
}

// hostPID finds the workload's pid in our PID namespace: init's only child.
func (s *Sandbox) hostPID() int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", s.initPID))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	return 0
}

// kill ends init with SIGKILL; the kernel then kills every process in the
// sandbox's PID namespace.
func (s *Sandbox) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
}

// Stop kills whatever still runs and waits for init to be reaped.
func (s *Sandbox) Stop(ctx context.Context) error {
	if s.cgDone != nil {
		<-s.cgDone // never race the background creation
	}
	if s.exited != nil {
		select {
		case <-s.exited:
		default:
			s.kill()
			select {
			case <-s.exited:
			case <-ctx.Done():
				return provider.Wrap(provider.CodeStopFailed, fmt.Sprintf("init %d did not exit", s.initPID), ctx.Err())
			}
		}
	}
	if s.ctl != nil {
		s.ctl.Close()
		s.ctl = nil
	}
	if s.egress != nil {
		s.egress.Close()
	}
	if s.consent != nil {
		s.consent.Close()
	}
	s.slots.stop()
	s.sockMu.Lock()
	if s.sockets != nil {
		s.sockets.Close()
		s.sockets = nil
	}
	s.sockMu.Unlock()
	startup.Add("supervisor", "linux: init reaped")
	if s.cg != nil {
		if err := s.cg.Kill(); err != nil {
			return provider.LayerError(provider.CodeStopFailed, "cgroups", err)
		}
		startup.Add("supervisor", "linux: cgroup killed")
	}
	return nil
}

// Deprovision removes the cgroup, the per-run state directory (the trust
// and credential files) and the placeholders no other run holds (once init is gone:
// removing one still mounted inside would detach it there).
func (s *Sandbox) Deprovision(ctx context.Context) error {
	if s.swept != nil {
		<-s.swept
		startup.Add("supervisor", "linux: waited for the sweep")
	}
	// The placeholders go while the cgroup is removed: neither needs
	// the other, and both are a run's last wait.
	released := make(chan struct{})
	go func() {
		defer close(released)
		if s.placeholdersReady() == nil && (s.exited == nil || isClosed(s.exited)) {
			s.placeholders.Release()
			startup.Add("supervisor", "linux: placeholders released")
		}
	}()
	defer func() { <-released }()
	if s.stateDir != "" {
		if err := os.RemoveAll(s.stateDir); err != nil {
			return provider.Wrap(provider.CodeStopFailed, "linux: sandbox "+s.id, err)
		}
		s.stateDir = ""
	}
	if s.cg != nil {
		if err := s.cg.Remove(); err != nil {
			return provider.LayerError(provider.CodeStopFailed, "cgroups", err)
		}
		s.cg = nil
		startup.Add("supervisor", "linux: cgroup removed")
	}
	return nil
}
