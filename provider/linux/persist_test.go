//go:build linux

package linux

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/detached"
	"github.com/corral-sandbox/corral/internal/procstat"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// Persistent sandboxes attacked: from inside (the workload, uid nobody
// under a root caller, the caller's own uid under an unprivileged one),
// from other local users, and through what the feature leaves on disk
// (its state directory and the supervisor's record there). Every test
// here makes real sandboxes; TestPersistUnprivileged runs them all again
// as corral-test. Helper processes are this test binary again:
// TestPersistentHelper on the host, TestPersistentProbe inside a sandbox.

// workdirs are a workdir and a home for a sandbox; as root the workdir
// is the workload's (nobody's), as in the conformance suite.
func workdirs(t *testing.T, uid int) (wd, home string) {
	t.Helper()
	wd, home = providertest.PublicDir(t), providertest.PublicDir(t)
	if os.Geteuid() == 0 {
		if err := os.Chown(wd, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return wd, home
}

// planFor maps the default policy, changed by adjust, for wd and home.
func planFor(wd, home string, adjust func(*policy.Policy)) (*provider.Plan, error) {
	pol := policy.Default()
	for _, l := range New().Capabilities(context.Background()).Layers {
		if l.State == provider.LayerUnavailable {
			pol.Layers[l.Layer] = policy.Optional // cgroups, unprivileged on cgroup v1
		}
	}
	if adjust != nil {
		adjust(pol)
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH, "LANG=C"}})
	if err != nil {
		return nil, err
	}
	plan, loss := New().Map(context.Background(), r)
	if loss.HasErrors() {
		return nil, provider.Rejected(loss)
	}
	return plan, nil
}

func persistPlan(t *testing.T, adjust func(*policy.Policy)) (*provider.Plan, string) {
	t.Helper()
	wd, home := workdirs(t, 65534)
	plan, err := planFor(wd, home, adjust)
	if err != nil {
		t.Fatal(err)
	}
	return plan, wd
}

// owner is a Managed owner of this test's own.
func owner(t *testing.T) string { return "persist-test-" + strings.ReplaceAll(t.Name(), "/", "-") }

// startPersistent provisions and starts a persistent sandbox of plan;
// Destroy (by a fresh provider, as the gateway does) is its cleanup.
func startPersistent(t *testing.T, plan *provider.Plan) *persistent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := New().Provision(ctx, plan, provider.ProvisionOptions{Persistent: true, Owner: owner(t)})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { _ = New().Destroy(context.Background(), sb.ID()) })
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return sb.(*persistent)
}

type execResult struct {
	st             provider.ExitStatus
	err            error
	stdout, stderr string
	pid            int
}

func run(t *testing.T, sb provider.Sandbox, args ...string) execResult {
	t.Helper()
	return runSpec(t, context.Background(), sb, provider.ExecSpec{Args: args})
}

// runSpec runs spec in sb, with stdout and stderr in files unless spec
// has its own.
func runSpec(t *testing.T, ctx context.Context, sb provider.Sandbox, spec provider.ExecSpec) execResult {
	t.Helper()
	var files [2]*os.File
	for i := range files {
		f, err := os.CreateTemp("", "persist-out-")
		if err != nil {
			return execResult{err: err}
		}
		defer os.Remove(f.Name())
		defer f.Close()
		files[i] = f
	}
	if spec.Stdout == nil {
		spec.Stdout = files[0]
	}
	if spec.Stderr == nil && !spec.TTY {
		spec.Stderr = files[1]
	}
	var r execResult
	started := spec.Started
	spec.Started = func(pid int) {
		r.pid = pid
		if started != nil {
			started(pid)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r.st, r.err = sb.Exec(ctx, spec)
	b, _ := os.ReadFile(files[0].Name())
	e, _ := os.ReadFile(files[1].Name())
	r.stdout, r.stderr = string(b), string(e)
	return r
}

// probeBinary is a copy of this test binary that the workload can run (a
// 0755 directory, which plans grant read-only with grantProbe).
func probeBinary(t *testing.T) string {
	t.Helper()
	return providertest.ProbeBinary(t, providertest.PublicDir(t))
}

func grantProbe(bin string) func(*policy.Policy) {
	return func(p *policy.Policy) {
		p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, policy.PathRule{Path: filepath.Dir(bin)})
	}
}

// probeArgs runs TestPersistentProbe in mode.
func probeArgs(bin, mode string, args ...string) []string {
	return append([]string{bin, "-test.run=^TestPersistentProbe$", mode}, args...)
}

// probeOut is what a probe printed on its PROBE line, decoded into v.
func probeOut(t *testing.T, r execResult, v any) {
	t.Helper()
	for _, line := range strings.Split(r.stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "PROBE "); ok {
			if err := json.Unmarshal([]byte(rest), v); err != nil {
				t.Fatalf("probe output %q: %v", rest, err)
			}
			return
		}
	}
	t.Fatalf("the probe printed no result (%+v, %v):\n%s\n%s", r.st, r.err, r.stdout, r.stderr)
}

// TestPersistentProbe is the workload's side of the attacks, run inside a
// sandbox as probeArgs; it does nothing in an ordinary test run.
func TestPersistentProbe(t *testing.T) {
	args := flag.Args()
	if len(args) == 0 {
		t.Skip("runs inside a sandbox (probeArgs)")
	}
	out := map[string]string{}
	switch args[0] {
	case "sleep":
		time.Sleep(time.Hour)
	case "connect":
		// The supervisor's socket, as args[1] names it: an op, the
		// reply, how many fds came with it.
		for _, op := range []string{"hello", "exec"} {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				out[op] = "socket: " + err.Error()
				continue
			}
			if err := unix.Connect(fd, &unix.SockaddrUnix{Name: args[1]}); err != nil {
				out[op] = "connect: " + err.Error()
				unix.Close(fd)
				continue
			}
			// The supervisor may have answered and closed before the
			// request is sent: its answer is read all the same.
			req, _ := json.Marshal(persistReq{Op: op, Args: []string{"true"}})
			serr := unix.Sendmsg(fd, req, nil, nil, 0)
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10})
			buf, oob := make([]byte, 1<<16), make([]byte, unix.CmsgSpace(4*4))
			n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			out[op] = fmt.Sprintf("send %v, reply %q, %d fds, err %v", serr, buf[:max(n, 0)], len(rightsOf(oob[:max(oobn, 0)])), err)
			unix.Close(fd)
		}
	case "signals":
		// Every signal to init (pid 1), as kill(2) and as a queued
		// signal whose siginfo says SI_QUEUE (rt_sigqueueinfo,
		// rt_tgsigqueueinfo, pidfd_send_signal): the Go runtime takes
		// the latter for a fault of its own.
		pidfd, _, e := unix.Syscall(unix.SYS_PIDFD_OPEN, 1, 0, 0)
		if e != 0 {
			out["pidfd_open"] = e.Error()
		}
		for sig := 1; sig <= 64; sig++ {
			var info [128]byte
			*(*int32)(unsafe.Pointer(&info[0])) = int32(sig)
			*(*int32)(unsafe.Pointer(&info[8])) = -1 // si_code SI_QUEUE
			calls := map[string]func() syscall.Errno{
				"kill": func() syscall.Errno { _, _, e := unix.Syscall(unix.SYS_KILL, 1, uintptr(sig), 0); return e },
				"rt_sigqueueinfo": func() syscall.Errno {
					_, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, 1, uintptr(sig), uintptr(unsafe.Pointer(&info)))
					return e
				},
				"rt_tgsigqueueinfo": func() syscall.Errno {
					_, _, e := unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, 1, 1, uintptr(sig), uintptr(unsafe.Pointer(&info)), 0, 0)
					return e
				},
				"pidfd_send_signal": func() syscall.Errno {
					_, _, e := unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, pidfd, uintptr(sig), uintptr(unsafe.Pointer(&info)), 0, 0, 0)
					return e
				},
			}
			for name, call := range calls {
				if e := call(); e != 0 {
					out[fmt.Sprintf("%s %d", name, sig)] = e.Error()
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
		_, _, e = unix.Syscall(unix.SYS_KILL, 1, 0, 0)
		out["init"] = fmt.Sprint(e == 0)
	default:
		t.Fatalf("unknown probe %q", args[0])
	}
	b, _ := json.Marshal(out)
	fmt.Printf("PROBE %s\n", b)
}

// TestPersistentHelper is a caller of the provider on the host, run by a
// test as helperCmd; it does nothing in an ordinary test run. Its first
// arguments are the state directory ("-": StateBase's default, from
// XDG_RUNTIME_DIR or TMPDIR), the workdir and the home.
func TestPersistentHelper(t *testing.T) {
	args := flag.Args()
	if len(args) < 4 {
		t.Skip("runs as a helper process (helperCmd)")
	}
	// TestMain made a state directory of its own for this process.
	os.RemoveAll(filepath.Dir(os.Getenv(StateDirEnv)))
	if args[1] == "-" {
		os.Unsetenv(StateDirEnv)
	} else {
		os.Setenv(StateDirEnv, args[1])
	}
	fmt.Printf("BASE %s\n", StateBase())
	ctx := context.Background()
	plan, err := planFor(args[2], args[3], nil)
	if err == nil && args[0] == "start" {
		var sb provider.Sandbox
		if sb, err = New().Provision(ctx, plan, provider.ProvisionOptions{Persistent: true, Owner: "persist-test-helper"}); err == nil {
			if err = sb.Start(ctx); err == nil {
				fmt.Printf("STATE %s\n", sb.(provider.Persistent).State())
				// An exec in flight when this caller is killed.
				go sb.Exec(ctx, provider.ExecSpec{Args: []string{"sleep", "1000"}, Started: func(pid int) { fmt.Printf("EXEC %d\n", pid) }})
				select {}
			}
		}
	}
	if err == nil && args[0] == "lifecycle" {
		var sb provider.Sandbox
		if sb, err = New().Provision(ctx, plan, provider.ProvisionOptions{Persistent: true, Owner: "persist-test-helper"}); err == nil {
			if err = sb.Start(ctx); err == nil {
				var st provider.ExitStatus
				st, err = sb.Exec(ctx, provider.ExecSpec{Args: []string{"true"}})
				if err == nil && st.Code != 0 {
					err = fmt.Errorf("exec: %+v", st)
				}
			}
			err = errors.Join(err, New().Destroy(ctx, sb.ID()))
		}
	}
	if err != nil {
		fmt.Printf("RESULT error: %v\n", err)
	} else {
		fmt.Printf("RESULT ok\n")
	}
}

// testUser is corral-test (.ci/run creates it), or the test is skipped.
func testUser(t *testing.T) (u *user.User, uid, gid int) {
	t.Helper()
	u, err := user.Lookup("corral-test")
	if err != nil {
		t.Skipf("no user corral-test (.ci/run creates it): %v", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return u, uid, gid
}

// testCmd runs this test binary's copy bin with args, as uid (-1: ours;
// gid the same number unless given) with env.
func testCmd(bin string, uid, gid int, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + policy.DefaultPATH, "LANG=C"}, env...)
	cmd.Dir = "/"
	if gid < 0 {
		gid = uid
	}
	if uid >= 0 && uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	}
	return cmd
}

// helperCmd runs TestPersistentHelper from bin (a copy another user can
// run) as uid (-1: ours) with env.
func helperCmd(bin string, uid int, env []string, args ...string) *exec.Cmd {
	return testCmd(bin, uid, -1, env, append([]string{"-test.run=^TestPersistentHelper$", "-test.count=1"}, args...)...)
}

// helperLines reads the helper's output lines into a channel.
func helperLines(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// nsLink is the pid namespace of pid, as /proc/PID/ns/pid names it.
func nsLink(t *testing.T, pid int) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// inNamespace lists the host pids of the processes in pid namespace ns.
func inNamespace(ns string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupDirs are the cgroup directories named id that pid is in
// (/proc/PID/cgroup), under the hierarchies' usual mount point.
func cgroupDirs(pid int, id string) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || filepath.Base(parts[2]) != id {
			continue
		}
		v2, _ := filepath.Glob("/sys/fs/cgroup" + parts[2])
		v1, _ := filepath.Glob("/sys/fs/cgroup/*" + parts[2])
		for _, d := range append(v2, v1...) {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// snapshot is what a running persistent sandbox has on the host.
type snapshot struct {
	id, dir, owner string
	sup, init      detached.Proc
	ns             string   // init's pid namespace
	cgroups        []string // its cgroup directories
	workdir        string
	entries        []string // the workdir's entries before the sandbox
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func snap(t *testing.T, sb *persistent, own, workdir string, before []string) snapshot {
	t.Helper()
	s := snapshot{id: sb.id, dir: sb.dir, owner: own, sup: sb.supervisor(), init: sb.init, workdir: workdir, entries: before}
	if !s.sup.Alive() || !s.init.Alive() {
		t.Fatalf("sandbox %s: supervisor %+v alive %v, init %+v alive %v", s.id, s.sup, s.sup.Alive(), s.init, s.init.Alive())
	}
	s.ns = nsLink(t, s.init.PID)
	s.cgroups = cgroupDirs(s.init.PID, s.id)
	if len(s.cgroups) == 0 && provider.StateOf(sb.Layers(), policy.LayerCgroups) == provider.LayerActive {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.init.PID))
		t.Fatalf("sandbox %s: cgroups active, but init's cgroups are not found:\n%s", s.id, b)
	}
	return s
}

// left is what of s is still on the host.
func (s snapshot) left(t *testing.T) []string {
	var out []string
	if s.sup.Alive() {
		out = append(out, fmt.Sprintf("supervisor %d", s.sup.PID))
	}
	if s.init.Alive() {
		out = append(out, fmt.Sprintf("init %d", s.init.PID))
	}
	for _, pid := range inNamespace(s.ns) {
		out = append(out, fmt.Sprintf("process %d in the sandbox's pid namespace", pid))
	}
	if _, err := os.Lstat(s.dir); err == nil {
		out = append(out, "state directory "+s.dir)
	}
	for _, d := range s.cgroups {
		if _, err := os.Lstat(d); err == nil {
			out = append(out, "cgroup "+d)
		}
	}
	if s.workdir != "" {
		if now := entries(t, s.workdir); !slices.Equal(now, s.entries) {
			out = append(out, fmt.Sprintf("workdir entries %q, were %q", now, s.entries))
		}
	}
	if ids, err := New().Managed(context.Background(), s.owner); err != nil || slices.Contains(ids, s.id) {
		out = append(out, fmt.Sprintf("Managed(%s) = %v, %v", s.owner, ids, err))
	}
	return out
}

// gone fails the test unless nothing of s is left (retried for 10s).
func (s snapshot) gone(t *testing.T, after string) {
	t.Helper()
	var left []string
	for i := 0; i < 100; i++ {
		if left = s.left(t); len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("after %s, sandbox %s left %q", after, s.id, left)
}

// started is a started persistent sandbox of persistPlan(adjust), with
// its plan and its snapshot.
func started(t *testing.T, adjust func(*policy.Policy)) (*provider.Plan, *persistent, snapshot) {
	t.Helper()
	plan, wd := persistPlan(t, adjust)
	before := entries(t, wd)
	sb := startPersistent(t, plan)
	return plan, sb, snap(t, sb, owner(t), wd, before)
}

// destroy destroys s by a fresh provider, as the gateway does, and fails
// the test unless nothing is left; a supervisor left is stopped.
func (s snapshot) destroy(t *testing.T, after string) {
	t.Helper()
	if err := New().Destroy(context.Background(), s.id); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	s.gone(t, "Destroy after "+after)
	stopSupervisor(s.sup)
}

// alive fails the test unless sb still runs, with the same init, and
// runs an exec.
func alive(t *testing.T, sb *persistent, init detached.Proc, after string) {
	t.Helper()
	if !sb.Running(context.Background()) || !init.Alive() {
		t.Fatalf("after %s the sandbox is gone (init %+v alive %v)", after, init, init.Alive())
	}
	if r := run(t, sb, "echo", "still"); r.err != nil || r.st.Code != 0 || r.stdout != "still\n" {
		t.Fatalf("after %s an exec gives %+v %v %q %q", after, r.st, r.err, r.stdout, r.stderr)
	}
}

// (a) The supervisor outlives its caller: a caller that provisioned and
// started the sandbox, with an exec in flight, is SIGKILLed; its exec is
// killed with it (its socket closed), the sandbox is not. A fresh
// provider recovers it, runs an exec, leaves a process in the background
// and destroys it: nothing is left (supervisor, init, any process of its
// pid namespace, state directory, cgroup, placeholders in the workdir).
func TestPersistentOutlivesCaller(t *testing.T) {
	needPureGo(t)
	bin := probeBinary(t)
	wd, home := workdirs(t, 65534)
	before := entries(t, wd)
	cmd := helperCmd(bin, -1, nil, "start", os.Getenv(StateDirEnv), wd, home)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := helperLines(stdout)
	var state []byte
	execPID := 0
	timeout := time.After(time.Minute)
	for state == nil || execPID == 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Process.Kill()
				t.Fatalf("the helper ended: %v", cmd.Wait())
			}
			if rest, ok := strings.CutPrefix(l, "STATE "); ok {
				state = []byte(rest)
			} else if rest, ok := strings.CutPrefix(l, "EXEC "); ok {
				execPID, _ = strconv.Atoi(rest)
			} else if strings.HasPrefix(l, "RESULT ") {
				t.Fatalf("helper: %s", l)
			}
		case <-timeout:
			cmd.Process.Kill()
			t.Fatal("the helper said nothing within a minute")
		}
	}
	var st persistState
	if err := json.Unmarshal(state, &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = New().Destroy(context.Background(), st.ID) })
	execProc := detached.ProcOf(execPID)
	if execPID <= 0 || !execProc.Alive() {
		t.Fatalf("the helper's exec has no live host pid (%d)", execPID)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	plan, err := planFor(wd, home, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec, err := New().Recover(ctx, plan, state)
	if err != nil {
		t.Fatalf("Recover after the caller's SIGKILL: %v", err)
	}
	sb := rec.(*persistent)
	for i := 0; i < 50 && execProc.Alive(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if execProc.Alive() {
		t.Errorf("the exec of the killed caller (host pid %d) still runs", execPID)
	}
	for _, l := range plan.Layers {
		if l.State == provider.LayerActive && provider.StateOf(sb.Layers(), l.Layer) != provider.LayerActive {
			t.Errorf("recovered: layer %s is %s, planned active", l.Layer, provider.StateOf(sb.Layers(), l.Layer))
		}
	}
	s := snap(t, sb, "persist-test-helper", wd, before)
	if ids, err := New().Managed(ctx, "persist-test-helper"); err != nil || !slices.Contains(ids, st.ID) {
		t.Errorf("Managed = %v, %v; want %s", ids, err, st.ID)
	}
	if r := run(t, sb, "sh", "-c", "echo recovered; sleep 1000 >/dev/null 2>&1 </dev/null &"); r.err != nil || r.st.Code != 0 || r.stdout != "recovered\n" {
		t.Fatalf("exec after Recover: %+v %v %q %q", r.st, r.err, r.stdout, r.stderr)
	}
	if n := len(inNamespace(s.ns)); n < 2 {
		t.Errorf("%d processes in the sandbox, want init and the background sleep", n)
	}
	if err := New().Destroy(ctx, st.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	s.gone(t, "Destroy of a recovered sandbox")
	if _, err := New().Recover(ctx, plan, state); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("Recover after Destroy: %v, want %s", err, provider.CodeNotFound)
	}
}

// (b) The supervisor's socket is out of the workload's reach: its state
// directory is not in the sandbox, init's fds cannot be read through
// /proc/1, and an exec has no fd but its own stdio.
func TestPersistentSupervisorInvisible(t *testing.T) {
	needPureGo(t)
	plan, _ := persistPlan(t, func(p *policy.Policy) { p.Network.UnixSockets = policy.UnixSocketsAllow })
	sb := startPersistent(t, plan)
	script := `for p in "$1" "$3" /proc/1/fd/ /proc/1/root/ /proc/1/cwd/ /proc/1/map_files/; do
	ls "$p" >/dev/null 2>&1 && echo "listed $p"
done
for p in "$2" /proc/1/fd/3; do
	test -e "$p" && echo "found $p"
	readlink "$p" && echo "read link $p"
done
for p in /proc/1/environ /proc/1/mem /proc/1/maps; do
	test -s "$p" && echo "found $p"; cat "$p" >/dev/null 2>&1 && echo "read $p"
done
ls /proc/self/fd`
	r := run(t, sb, "sh", "-c", script, "sh", sb.dir, filepath.Join(sb.dir, "sock"), StateBase())
	if r.err != nil || r.st.Code != 0 {
		t.Fatalf("%+v %v %q", r.st, r.err, r.stderr)
	}
	if strings.ContainsAny(r.stdout, "abcdefghijklmnopqrstuvwxyz") {
		t.Errorf("the workload reached the supervisor's side:\n%s", r.stdout)
	}
	// ls's own directory fd is the last.
	if fds := strings.Fields(r.stdout); !slices.Equal(fds, []string{"0", "1", "2", "3"}) {
		t.Errorf("an exec's fds: %q, want 0 1 2 (and ls's 3)", fds)
	}
}

// (b) Handed the supervisor's socket anyway (an O_PATH fd of it, as a
// stray grant or fd would), the workload is refused: as nobody by the
// socket's mode, as the caller's own uid by SO_PEERCRED's pid (not in
// the supervisor's pid namespace). Other local users are refused by the
// mode, and by SO_PEERCRED's uid with the socket opened to them.
func TestPersistentSocketRefusesStrangers(t *testing.T) {
	needPureGo(t)
	bin := probeBinary(t)
	plan, _ := persistPlan(t, func(p *policy.Policy) {
		grantProbe(bin)(p)
		p.Network.UnixSockets = policy.UnixSocketsAllow
	})
	sb := startPersistent(t, plan)
	sockPath := filepath.Join(sb.dir, "sock")
	opath := func() *os.File {
		fd, err := unix.Open(sockPath, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fd), "sock")
	}
	f := opath()
	defer f.Close()
	r := runSpec(t, context.Background(), sb, provider.ExecSpec{Args: probeArgs(bin, "connect", "/proc/self/fd/3"), ExtraFiles: []*os.File{f}})
	var out map[string]string
	probeOut(t, r, &out)
	log := func() string {
		b, _ := os.ReadFile(filepath.Join(sb.dir, "supervisor.log"))
		return string(b)
	}
	for _, op := range []string{"hello", "exec"} {
		got := out[op]
		switch {
		case os.Geteuid() == 0 && strings.Contains(got, "permission denied"):
		case os.Geteuid() != 0 && strings.Contains(got, "not in the supervisor's pid namespace") && strings.Contains(got, "0 fds"):
		default:
			t.Errorf("the workload's %s on the supervisor's socket: %s", op, got)
		}
	}
	if os.Geteuid() != 0 && strings.Count(log(), "not in the supervisor's pid namespace") != 2 {
		t.Errorf("the supervisor's log does not record both refusals:\n%s", log())
	}
	alive(t, sb, sb.init, "the workload's connects")

	// Another local user, on the host.
	other := 65534
	if os.Geteuid() != 0 {
		t.Log("not root: no other user to try as")
		return
	}
	try := func() string {
		f := opath()
		defer f.Close()
		cmd := testCmd(bin, other, -1, nil, probeArgs(bin, "connect", "/proc/self/fd/3")[1:]...)
		cmd.ExtraFiles = []*os.File{f}
		b, err := cmd.CombinedOutput()
		var out map[string]string
		probeOut(t, execResult{stdout: string(b), err: err}, &out)
		return out["hello"]
	}
	if got := try(); !strings.Contains(got, "permission denied") {
		t.Errorf("uid %d on the host: %s, want the socket's mode to refuse it", other, got)
	}
	if err := os.Chmod(sockPath, 0o666); err != nil {
		t.Fatal(err)
	}
	refusal := fmt.Sprintf("uid %d may not use this sandbox", other)
	if got := try(); !strings.Contains(got, refusal) || !strings.Contains(got, "0 fds") || !strings.Contains(log(), refusal) {
		t.Errorf("uid %d on the host, the socket 0666: %s, want SO_PEERCRED to refuse it (and the log to say so):\n%s", other, got, log())
	}
	alive(t, sb, sb.init, "other users' connects")
}

// A policy that would put the state directory in the sandbox is refused:
// the workload there could write the supervisor's record (or any other
// sandbox's), and Destroy, which goes by it, would leave the sandbox
// running; it could also hide sandboxes from Managed or plant sockets.
// Without the refusal this test plays the attack and shows its effect.
func TestPersistentStateNotGranted(t *testing.T) {
	needPureGo(t)
	shared := providertest.PublicDir(t)
	for _, c := range []struct {
		name  string
		state string // StateDirEnv, under shared
		deny  bool   // the policy denies shared/state
		ok    bool
	}{
		{"state inside a read-write grant", "state/sandboxes", false, false},
		{"grant inside the state directory", "", false, false},
		{"state denied inside the grant", "state/sandboxes", true, true},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			base := filepath.Join(shared, c.state)
			grant := shared
			if c.state == "" {
				base = shared
				grant = filepath.Join(shared, "inside")
				if err := os.MkdirAll(grant, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv(StateDirEnv, base)
			plan, _ := persistPlan(t, func(p *policy.Policy) {
				p.Filesystem.ReadWrite = append(p.Filesystem.ReadWrite, policy.PathRule{Path: grant})
				if c.deny {
					if err := os.MkdirAll(filepath.Join(shared, "state"), 0o755); err != nil {
						t.Fatal(err)
					}
					p.Filesystem.Deny = append(p.Filesystem.Deny, policy.PathRule{Path: filepath.Join(shared, "state")})
				}
			})
			sb, err := New().Provision(context.Background(), plan, provider.ProvisionOptions{Persistent: true, Owner: owner(t)})
			if !c.ok {
				if err == nil {
					defer New().Destroy(context.Background(), sb.ID())
					attackState(t, sb.(*persistent))
					t.Fatal("Provision accepted a policy that grants the state directory")
				}
				if provider.CodeOf(err) != provider.CodePolicyRejected || !strings.Contains(err.Error(), StateDirEnv) {
					t.Errorf("Provision: %v, want %s naming %s", err, provider.CodePolicyRejected, StateDirEnv)
				}
				return
			}
			if err != nil {
				t.Fatalf("Provision with the state denied: %v", err)
			}
			t.Cleanup(func() { _ = New().Destroy(context.Background(), sb.ID()) })
			if err := sb.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := run(t, sb, "sh", "-c", `ls "$1" 2>&1 || true`, "sh", StateBase())
			if strings.Contains(r.stdout, sb.ID()) {
				t.Errorf("the workload lists the state directory: %s", r.stdout)
			}
		})
	}
}

// attackState is the workload's attack on a state directory it can
// write: it gives its sandbox to another owner (hidden from its own
// control plane's Managed, so from its sweeps) and replaces the
// supervisor's record; Destroy must still leave nothing.
func attackState(t *testing.T, sb *persistent) {
	t.Helper()
	if err := sb.Start(context.Background()); err != nil {
		t.Logf("Start: %v", err)
		return
	}
	s := snap(t, sb, owner(t), "", nil)
	r := run(t, sb, "sh", "-c", `echo someone-else > "$1/owner"; echo '{"pid":1,"start_ticks":1}' > "$1/supervisor.json"`, "sh", sb.dir)
	t.Logf("the workload rewrites %s/owner and supervisor.json: %+v %v %s", sb.dir, r.st, r.err, r.stderr)
	if ids, _ := New().Managed(context.Background(), owner(t)); !slices.Contains(ids, sb.id) {
		t.Errorf("the workload hid its sandbox from Managed(%s): %v", owner(t), ids)
	}
	s.destroy(t, "the workload rewrote the sandbox's record")
}

// (c) Every exec, plain, with extra files or with a terminal, and
// however many, carries every layer, checked from outside in
// /proc/PID (namespaces and cgroup as init's, none of ours; seccomp
// filter, no_new_privs, no capabilities; only its own fds) and from
// inside (/proc/self/status; Landlock refuses "/", which no rule
// grants).
func TestPersistentExecLayers(t *testing.T) {
	needPureGo(t)
	plan, _ := persistPlan(t, nil)
	sb := startPersistent(t, plan)
	initStatus, err := ProcStatus(sb.init.PID)
	if err != nil {
		t.Fatal(err)
	}
	initCgroup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sb.init.PID))
	landlock := provider.StateOf(sb.Layers(), policy.LayerLandlock) == provider.LayerActive
	seccomp := provider.StateOf(sb.Layers(), policy.LayerSeccomp) == provider.LayerActive
	outside := func(name string, pid, nfiles int) {
		t.Helper()
		if pid <= 0 {
			t.Errorf("%s: no host pid", name)
			return
		}
		for _, ns := range []string{"user", "mnt", "pid", "ipc", "uts", "net", "cgroup"} {
			mine, _ := os.Readlink("/proc/self/ns/" + ns)
			theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			inits, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", sb.init.PID, ns))
			if err1 != nil || err2 != nil || theirs != inits || theirs == mine {
				t.Errorf("%s: ns/%s %s (%v), init's %s (%v), ours %s", name, ns, theirs, err1, inits, err2, mine)
			}
		}
		st, err := ProcStatus(pid)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if held := HeldCapabilities(st); len(held) > 0 || st["CapInh"] != "0000000000000000" {
			t.Errorf("%s: capabilities %v, CapInh %s", name, held, st["CapInh"])
		}
		if st["NoNewPrivs"] != "1" || seccomp && (st["Seccomp"] != "2" || st["Seccomp_filters"] != initStatus["Seccomp_filters"]) {
			t.Errorf("%s: NoNewPrivs %s, Seccomp %s with %s filters (init: %s)", name, st["NoNewPrivs"], st["Seccomp"], st["Seccomp_filters"], initStatus["Seccomp_filters"])
		}
		if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); string(cg) != string(initCgroup) {
			t.Errorf("%s: cgroup\n%s\ninit's\n%s", name, cg, initCgroup)
		}
		var want []string
		for i := 0; i < 3+nfiles; i++ {
			want = append(want, strconv.Itoa(i))
		}
		// Read again for a while: sleep's dynamic loader opens and closes
		// a file or two as it starts.
		var fds, links []string
		for i := 0; i < 40 && (i == 0 || !slices.Equal(fds, want)); i++ {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			fds, links = nil, nil
			for _, e := range ents {
				fds = append(fds, e.Name())
				l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
				links = append(links, e.Name()+" -> "+l)
			}
		}
		if !slices.Equal(fds, want) {
			t.Errorf("%s: fds %q, want %q", name, links, want)
		}
	}
	inside := `grep -E '^(NoNewPrivs|Seccomp|Cap(Inh|Prm|Eff|Bnd|Amb)):' /proc/self/status | tr -s '\t' ' '
ls / >/dev/null 2>&1 && echo "root listed"
ls /proc/self/fd | tr '\n' ' '; echo
exec sleep 1000`
	want := "CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n"
	extra1, extra2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer extra1.Close()
	defer extra2.Close()
	specs := map[string]provider.ExecSpec{
		"plain":       {},
		"extra files": {ExtraFiles: []*os.File{extra1, extra2}},
		"tty":         {TTY: true},
	}
	for i := range 3 {
		specs[fmt.Sprintf("concurrent %d", i)] = provider.ExecSpec{}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string]execResult{}
	for name, spec := range specs {
		spec.Args = []string{"sh", "-c", inside}
		ctx, cancel := context.WithCancel(context.Background())
		spec.Started = func(pid int) {
			go func() {
				for i := 0; i < 100; i++ { // the script reaches its sleep
					if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "sleep\n" {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				outside(name, pid, len(spec.ExtraFiles))
				// The exec ends by itself, its output all read (a
				// cancelled one would not wait for its terminal's).
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			r := runSpec(t, ctx, sb, spec)
			mu.Lock()
			results[name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	for name, r := range results {
		out := strings.ReplaceAll(r.stdout, "\r\n", "\n")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !seccomp {
			want = strings.Replace(want, "Seccomp: 2", "Seccomp: 0", 1)
		}
		if !strings.HasPrefix(out, want) {
			t.Errorf("%s: inside, /proc/self/status says\n%s\nwant\n%s", name, out, want)
		}
		if strings.Contains(out, "root listed") == landlock {
			t.Errorf("%s: Landlock active %v, but / listed: %v", name, landlock, strings.Contains(out, "root listed"))
		}
		fds := strings.Fields(lines[len(lines)-1])
		n := 3 + len(specs[name].ExtraFiles) + 1 // ls's own
		var wantFDs []string
		for i := 0; i < n; i++ {
			wantFDs = append(wantFDs, strconv.Itoa(i))
		}
		if !slices.Equal(fds, wantFDs) {
			t.Errorf("%s: inside, fds %q, want %q", name, fds, wantFDs)
		}
		if r.err != nil || r.st.Signal != "SIGKILL" {
			t.Errorf("%s: ended %+v %v, want killed by SIGKILL", name, r.st, r.err)
		}
	}
	alive(t, sb, sb.init, "the execs")
}

// The Landlock probe of TestPersistentExecLayers can fail: with the
// layer optional and failed (fault injection), "/" is listed.
func TestPersistentExecLayersProbeFails(t *testing.T) {
	needPureGo(t)
	t.Setenv(FaultEnv, string(policy.LayerLandlock))
	plan, _ := persistPlan(t, func(p *policy.Policy) { p.Layers[policy.LayerLandlock] = policy.Optional })
	sb := startPersistent(t, plan)
	if provider.StateOf(sb.Layers(), policy.LayerLandlock) == provider.LayerActive {
		t.Fatalf("Landlock active despite the injected fault: %+v", sb.Layers())
	}
	if r := run(t, sb, "sh", "-c", "ls / >/dev/null && echo listed"); r.stdout != "listed\n" {
		t.Errorf("without Landlock: %+v %v %q %q", r.st, r.err, r.stdout, r.stderr)
	}
}

// The workload cannot end the sandbox by signalling init: every signal,
// by kill(2) and queued with a siginfo of its own (SI_QUEUE, which the
// Go runtime took for a fault of init's and crashed on).
func TestPersistentSignalsToInit(t *testing.T) {
	needPureGo(t)
	bin := probeBinary(t)
	plan, _ := persistPlan(t, grantProbe(bin))
	sb := startPersistent(t, plan)
	init := sb.init
	r := run(t, sb, "sh", "-c", "for s in TERM INT HUP QUIT USR1 USR2 ABRT SEGV BUS FPE ILL TRAP SYS PIPE ALRM KILL STOP CONT; do kill -$s 1; done; echo sent")
	if r.stdout != "sent\n" {
		t.Errorf("kill from the shell: %+v %v %q %q", r.st, r.err, r.stdout, r.stderr)
	}
	alive(t, sb, init, "kill -SIG 1 for every signal")
	r = runSpec(t, context.Background(), sb, provider.ExecSpec{Args: probeArgs(bin, "signals")})
	if r.st.Signal != "" {
		t.Errorf("the probe: %+v (%v) %s", r.st, r.err, r.stderr)
	} else {
		var out map[string]string
		probeOut(t, r, &out)
		if out["init"] != "true" {
			t.Errorf("init is gone after the probe's signals: %v", out)
		}
		t.Logf("refused: %v", out)
	}
	alive(t, sb, init, "queued signals (SI_QUEUE) to init")
}

// A caller without CORRAL_LINUX_STATE_DIR keeps its sandboxes under
// XDG_RUNTIME_DIR or TMPDIR, which the supervisor's environment does not
// carry: it must be told where they are, or every persistent sandbox of
// such a caller fails to start. Another local user's directory in the
// way, or a symlink, is refused.
func TestPersistentStateDirFromEnv(t *testing.T) {
	needPureGo(t)
	bin := probeBinary(t)
	uid := os.Geteuid()
	if uid == 0 {
		_, uid, _ = testUser(t)
	}
	mine := func(d string, mode os.FileMode) string {
		if err := os.MkdirAll(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(d, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	type tc struct {
		name string
		env  func(d string) ([]string, string) // the environment, and where the sandbox must have been
		want string                            // RESULT
	}
	cases := []tc{
		{"XDG_RUNTIME_DIR", func(d string) ([]string, string) {
			x := mine(filepath.Join(d, "xdg"), 0o700)
			return []string{"XDG_RUNTIME_DIR=" + x}, filepath.Join(x, "corral", "sandboxes")
		}, "ok"},
		{"TMPDIR", func(d string) ([]string, string) {
			x := mine(filepath.Join(d, "tmp"), 0o700)
			return []string{"TMPDIR=" + x}, filepath.Join(x, fmt.Sprintf("corral-%d", uid), "sandboxes")
		}, "ok"},
	}
	if os.Geteuid() == 0 {
		// Another user (nobody) was first in a shared sticky TMPDIR.
		shared := func(d string) string {
			s := filepath.Join(d, "shared")
			if err := os.Mkdir(s, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(s, 0o1777); err != nil {
				t.Fatal(err)
			}
			return s
		}
		cases = append(cases, tc{"TMPDIR with another user's corral-UID", func(d string) ([]string, string) {
			s := shared(d)
			x := filepath.Join(s, fmt.Sprintf("corral-%d", uid))
			if err := os.Mkdir(x, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(x, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(x, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return []string{"TMPDIR=" + s}, filepath.Join(x, "sandboxes")
		}, "controlled by another user"}, tc{"TMPDIR with another user's symlink as corral-UID", func(d string) ([]string, string) {
			s := shared(d)
			target := mine(filepath.Join(d, "target"), 0o700)
			x := filepath.Join(s, fmt.Sprintf("corral-%d", uid))
			if err := os.Symlink(target, x); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(x, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return []string{"TMPDIR=" + s}, filepath.Join(target, "sandboxes")
		}, "not a directory"})
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			d := providertest.PublicDir(t)
			env, where := c.env(d)
			wd, home := workdirs(t, uid)
			cmd := helperCmd(bin, uid, env, "lifecycle", "-", wd, home)
			out, err := cmd.CombinedOutput()
			got := ""
			for _, l := range strings.Split(string(out), "\n") {
				if rest, ok := strings.CutPrefix(l, "RESULT "); ok {
					got = rest
				}
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("%v: %v, RESULT %q, want %q:\n%s", env, err, got, c.want, out)
			}
			if !strings.Contains(string(out), "BASE "+filepath.Clean(where)) && c.want == "ok" {
				t.Errorf("the helper's state base is not %s:\n%s", where, out)
			}
			if ents, err := os.ReadDir(where); err == nil && len(ents) > 0 {
				t.Errorf("%s keeps %d entries", where, len(ents))
			}
			if _, err := os.Lstat(where); err == nil && c.want != "ok" {
				t.Errorf("%s was made", where)
			}
		})
	}
}

// Stop and Destroy end the execs in flight (each returns, killed, saying
// why) and leave nothing; the supervisor survives them without a crash;
// an exec after is refused as not found.
func TestPersistentDestroyDuringExecs(t *testing.T) {
	needPureGo(t)
	for _, how := range []string{"Stop", "Destroy"} {
		t.Run(how, func(t *testing.T) {
			_, sb, s := started(t, nil)
			const n = 8
			results := make(chan execResult, n)
			started := make(chan int, n)
			for range n {
				go func() {
					results <- runSpec(t, context.Background(), sb, provider.ExecSpec{Args: []string{"sleep", "1000"}, Started: func(pid int) { started <- pid }})
				}()
			}
			for range n {
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("the execs did not start")
				}
			}
			t0 := time.Now()
			var log []byte
			if how == "Stop" {
				if err := sb.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				log, _ = os.ReadFile(filepath.Join(sb.dir, "supervisor.log"))
				if err := sb.Deprovision(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else if err := New().Destroy(context.Background(), sb.id); err != nil {
				t.Fatal(err)
			}
			for range n {
				select {
				case r := <-results:
					if r.err != nil || r.st.Code != 128+9 || r.st.Reason == "" {
						t.Errorf("an exec during %s: %+v %v", how, r.st, r.err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("an exec did not return after %s", how)
				}
			}
			if d := time.Since(t0); d > 10*time.Second {
				t.Errorf("%s and the execs' end took %s", how, d)
			}
			if strings.Contains(string(log), "panic") || strings.Contains(string(log), "fatal") {
				t.Errorf("the supervisor's log:\n%s", log)
			}
			s.gone(t, how+" during execs")
			t1 := time.Now()
			if r := run(t, sb, "true"); provider.CodeOf(r.err) != provider.CodeNotFound || time.Since(t1) > 5*time.Second {
				t.Errorf("an exec after %s: %+v %v (%s)", how, r.st, r.err, time.Since(t1))
			}
		})
	}
}

// A record (supervisor.json) that names another process is not taken
// for the supervisor: neither an unrelated process of ours nor one of the
// sandbox's own, whose command line (anything, inside) ends as the
// supervisor's does. Recover refuses; Destroy leaves that process alone
// and still ends the sandbox, found by its command line in our pid
// namespace.
func TestPersistentForgedRecord(t *testing.T) {
	needPureGo(t)
	bin := probeBinary(t)
	for _, who := range []string{"a process of ours", "a process of the sandbox"} {
		t.Run(strings.ReplaceAll(who, " ", "_"), func(t *testing.T) {
			plan, sb, s := started(t, grantProbe(bin))
			var victim detached.Proc
			if who == "a process of ours" {
				cmd := exec.Command("sleep", "1000")
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { cmd.Process.Kill(); cmd.Wait() }()
				victim = detached.ProcOf(cmd.Process.Pid)
			} else {
				pids := make(chan int, 1)
				go runSpec(t, context.Background(), sb, provider.ExecSpec{Args: probeArgs(bin, "sleep", PersistArg, sb.dir), Started: func(pid int) { pids <- pid }})
				select {
				case pid := <-pids:
					victim = detached.ProcOf(pid)
				case <-time.After(30 * time.Second):
					t.Fatal("the exec did not start")
				}
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", victim.PID))
				if !strings.HasSuffix(string(cmd), "\x00"+PersistArg+"\x00"+sb.dir+"\x00") {
					t.Fatalf("the sandbox's process has cmdline %q", cmd)
				}
			}
			b, _ := json.Marshal(victim)
			if err := os.WriteFile(filepath.Join(sb.dir, "supervisor.json"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := New().Recover(context.Background(), plan, sb.State()); err == nil {
				t.Errorf("Recover by a record naming %s (%+v) succeeded", who, victim)
			}
			s.destroy(t, "a forged record")
			if who == "a process of ours" && !victim.Alive() {
				t.Errorf("Destroy ended %s that the record named", who)
			}
		})
	}
}

// Orphans the workload leaves are reaped by init: no zombie is left in
// the sandbox, whatever the execs leave behind.
func TestPersistentNoZombies(t *testing.T) {
	needPureGo(t)
	plan, _ := persistPlan(t, nil)
	sb := startPersistent(t, plan)
	for range 5 {
		if r := run(t, sb, "sh", "-c", "(sleep 0.1 &) ; (true &) ; sleep 0.2 & exit 3"); r.st.Code != 3 {
			t.Fatalf("%+v %v %q", r.st, r.err, r.stderr)
		}
	}
	ns := nsLink(t, sb.init.PID)
	var zombies []int
	for i := 0; i < 30; i++ {
		zombies = zombies[:0]
		for _, pid := range inNamespace(ns) {
			if st, err := procstat.Read(pid); err == nil && !st.Running() {
				zombies = append(zombies, pid)
			}
		}
		if len(zombies) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("zombies left in the sandbox: %v", zombies)
}

// What the supervisor is sent (by a caller of its own uid: nothing else
// reaches it) that it cannot use is answered or dropped; the sandbox and
// the supervisor live on.
func TestPersistentSupervisorGarbage(t *testing.T) {
	needPureGo(t)
	plan, _ := persistPlan(t, nil)
	sb := startPersistent(t, plan)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	many := make([]int, 250)
	for i := range many {
		many[i] = int(devnull.Fd())
	}
	for name, m := range map[string]struct {
		b   []byte
		fds []int
	}{
		"empty":            {[]byte{}, nil},
		"not JSON":         {[]byte("\x00\xff{"), nil},
		"unknown op":       {[]byte(`{"op":"shell"}`), nil},
		"exec without cmd": {[]byte(`{"op":"exec"}`), nil},
		"exec fd mismatch": {[]byte(`{"op":"exec","args":["true"],"nfiles":2}`), []int{int(devnull.Fd())}},
		"exec many fds":    {[]byte(`{"op":"exec","args":["true"]}`), many},
		"huge":             {[]byte(`{"op":"exec","args":["` + strings.Repeat("x", 900<<10) + `"]}`), nil},
	} {
		c, err := sb.dial()
		if err != nil {
			t.Fatalf("%s: dial: %v", name, err)
		}
		var oob []byte
		if len(m.fds) > 0 {
			oob = unix.UnixRights(m.fds...)
		}
		_, _, werr := c.WriteMsgUnix(m.b, oob, nil)
		if werr != nil {
			t.Logf("%s: write %v", name, werr)
			c.Close()
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf, oobBuf := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, rerr := c.ReadMsgUnix(buf, oobBuf)
		if fds := rightsOf(oobBuf[:oobn]); len(fds) > 0 {
			t.Errorf("%s: the supervisor sent %d fds with %q", name, len(fds), buf[:n])
		}
		t.Logf("%s: write %v; reply %q %v", name, werr, buf[:n], rerr)
		c.Close()
	}
	alive(t, sb, sb.init, "garbage on the supervisor's socket")
}

// A terminal exec whose process leaves one behind that holds the
// terminal returns all the same (after a short wait for its output), and
// the next one gets a terminal of its own.
func TestPersistentTTYLeftBehind(t *testing.T) {
	needPureGo(t)
	plan, _ := persistPlan(t, nil)
	sb := startPersistent(t, plan)
	t0 := time.Now()
	r := runSpec(t, context.Background(), sb, provider.ExecSpec{Args: []string{"sh", "-c", "setsid sleep 1000 & sleep 0.5; tty"}, TTY: true})
	if r.err != nil || r.st.Code != 0 || !strings.Contains(r.stdout, "/dev/pts/") {
		t.Fatalf("tty exec: %+v %v %q", r.st, r.err, r.stdout)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("a tty exec whose background process holds the terminal took %s", d)
	}
	first := strings.TrimSpace(r.stdout)
	r = runSpec(t, context.Background(), sb, provider.ExecSpec{Args: []string{"tty"}, TTY: true})
	if r.err != nil || r.st.Code != 0 || strings.TrimSpace(r.stdout) == first {
		t.Errorf("second tty exec: %+v %v %q (first %q)", r.st, r.err, r.stdout, first)
	}
}

// TestPersistUnprivileged runs the TestPersistent tests again as the
// unprivileged user corral-test, whose workload has the caller's own uid.
func TestPersistUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedEnv) != "" || os.Geteuid() != 0 {
		t.Skip("not root: the TestPersistent tests themselves run unprivileged")
	}
	out := asTestUser(t, "^TestPersistent")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "--- SKIP") {
			t.Logf("as corral-test: %s", strings.TrimSpace(l))
		}
	}
}

// asTestUser runs the tests of this binary that match pattern as
// corral-test, from a copy it can run, and returns their output; it
// fails the test unless they all pass.
func asTestUser(t *testing.T, pattern string) string {
	t.Helper()
	needPureGo(t)
	u, uid, gid := testUser(t)
	bin := probeBinary(t)
	cmd := testCmd(bin, uid, gid, []string{"HOME=" + u.HomeDir, unprivilegedEnv + "=1"}, "-test.run="+pattern, "-test.count=1", "-test.v")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "\nPASS\n") {
		t.Fatalf("the tests %s as corral-test (uid %d): %v\n%s", pattern, uid, err, out)
	}
	return string(out)
}

// A supervisor that is killed (SIGKILL: no cleanup of its own) takes its
// sandbox with it (init has a parent-death signal): the exec in flight
// ends, the sandbox is not running, later execs and Recover say not
// found, and Destroy removes what the supervisor could not (its cgroup,
// the placeholders in the workdir), also while the supervisor is still
// exiting (its last thread holds the placeholders' locks).
func TestPersistentSupervisorKilled(t *testing.T) {
	needPureGo(t)
	for _, when := range []string{"at once", "once it is gone"} {
		t.Run(strings.ReplaceAll(when, " ", "_"), func(t *testing.T) {
			plan, sb, s := started(t, nil)
			started := make(chan int, 1)
			done := make(chan execResult, 1)
			go func() {
				done <- runSpec(t, context.Background(), sb, provider.ExecSpec{Args: []string{"sleep", "1000"}, Started: func(pid int) { started <- pid }})
			}()
			<-started
			if err := syscall.Kill(s.sup.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if r.err != nil || r.st.Code != 128+9 || r.st.Reason == "" {
					t.Errorf("the exec in flight: %+v %v", r.st, r.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the exec in flight did not end with its supervisor")
			}
			for i := 0; i < 100 && (s.init.Alive() || when != "at once" && s.sup.Alive()); i++ {
				time.Sleep(50 * time.Millisecond)
			}
			if sb.Running(context.Background()) || s.init.Alive() {
				t.Errorf("running after its supervisor's SIGKILL: init %+v alive %v", s.init, s.init.Alive())
			}
			if when != "at once" {
				if r := run(t, sb, "true"); provider.CodeOf(r.err) != provider.CodeNotFound {
					t.Errorf("exec after the supervisor's SIGKILL: %+v %v", r.st, r.err)
				}
				if _, err := New().Recover(context.Background(), plan, sb.State()); provider.CodeOf(err) != provider.CodeNotFound {
					t.Errorf("Recover after the supervisor's SIGKILL: %v", err)
				}
			}
			s.destroy(t, "the supervisor's SIGKILL")
		})
	}
}

// socketInodes are the inodes of the sockets pid holds ("socket:[N]").
func socketInodes(pid int) []string {
	var out []string
	ents, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, e := range ents {
		if l, err := os.Readlink(e); err == nil && strings.HasPrefix(l, "socket:[") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"))
		}
	}
	return out
}

// tcpInodes are the inodes of the TCP sockets in pid's network namespace.
func tcpInodes(pid int) []string {
	var out []string
	for _, f := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fs := strings.Fields(line); len(fs) > 9 {
				out = append(out, fs[9])
			}
		}
	}
	return out
}

// With network proxy, the egress listener (the sandbox's one way out)
// is held by the supervisor and handed to its callers (hello, again on
// Recover), never by init or an exec; the workload cannot take its port.
func TestPersistentEgressListener(t *testing.T) {
	needPureGo(t)
	plan, _ := persistPlan(t, func(p *policy.Policy) { p.Network.Mode = policy.NetworkProxy })
	sb := startPersistent(t, plan)
	if sb.EgressListener() == nil {
		t.Fatal("no egress listener after Start")
	}
	tcp := tcpInodes(sb.init.PID)
	if len(tcp) != 1 {
		t.Fatalf("the sandbox's network has TCP sockets %v, want the listener alone", tcp)
	}
	if !slices.Contains(socketInodes(sb.sup.PID), tcp[0]) {
		t.Errorf("the supervisor does not hold the listener (socket %s)", tcp[0])
	}
	// Init sends it to the supervisor, then closes it.
	for i := 0; i < 100 && slices.Contains(socketInodes(sb.init.PID), tcp[0]); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if slices.Contains(socketInodes(sb.init.PID), tcp[0]) {
		t.Errorf("init holds the egress listener")
	}
	pids := make(chan int, 1)
	done := make(chan execResult, 1)
	go func() {
		done <- runSpec(t, context.Background(), sb, provider.ExecSpec{
			Args:    []string{"sh", "-c", `ls /proc/self/fd | tr '\n' ' '; exec sleep 1000`},
			Started: func(pid int) { pids <- pid }})
	}()
	pid := <-pids
	for i := 0; i < 100; i++ {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "sleep\n" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if socks := socketInodes(pid); len(socks) > 0 {
		t.Errorf("an exec holds sockets %v", socks)
	}
	rec, err := New().Recover(context.Background(), plan, sb.State())
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if rec.(*persistent).EgressListener() == nil {
		t.Error("no egress listener after Recover")
	}
	// The workload's own listener on the proxy's port: refused.
	if r := run(t, sb, "perl", "-MSocket", "-e", fmt.Sprintf(`socket(S, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n"; bind(S, sockaddr_in(%d, inet_aton("127.0.0.1"))) or die "bind: $!\n"; print "bound\n"`, ProxyPort)); strings.Contains(r.stdout, "bound") {
		t.Errorf("the workload bound the proxy's port: %+v %q %q", r.st, r.stdout, r.stderr)
	} else {
		t.Logf("the workload's bind of %d: %q", ProxyPort, strings.TrimSpace(r.stderr))
	}
	if err := New().Destroy(context.Background(), sb.id); err != nil {
		t.Fatal(err)
	}
	<-done
}

// The policy's timeout ends an exec's process group, not the sandbox: a
// process the exec moved to a session of its own lives on (background
// processes of a persistent sandbox live until it ends), and Destroy ends
// it with the sandbox.
func TestPersistentExecTimeout(t *testing.T) {
	needPureGo(t)
	_, sb, s := started(t, func(p *policy.Policy) { p.Process.Limits.Timeout = policy.Duration(time.Second) })
	t0 := time.Now()
	r := run(t, sb, "sh", "-c", "setsid sleep 1000 & sleep 1000")
	if !r.st.TimedOut || time.Since(t0) > 10*time.Second {
		t.Errorf("exec past the timeout: %+v %v after %s", r.st, r.err, time.Since(t0))
	}
	var left []int
	for i := 0; i < 50; i++ {
		left = inNamespace(s.ns)
		if len(left) <= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) != 2 {
		t.Errorf("after the timeout the sandbox runs %v, want init and the setsid sleep", left)
	}
	alive(t, sb, s.init, "an exec's timeout")
	s.destroy(t, "a timed-out exec")
}

// A second Start of a sandbox is refused: a second supervisor would take
// its state directory over (record and socket) and leave the first one's
// sandbox running, out of Destroy's sight.
func TestPersistentStartTwice(t *testing.T) {
	needPureGo(t)
	_, sb, s := started(t, nil)
	if err := sb.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	if sup := sb.supervisor(); sup != s.sup {
		t.Errorf("the sandbox's supervisor is now %+v, was %+v", sup, s.sup)
	}
	alive(t, sb, s.init, "a second Start")
	s.destroy(t, "a second Start")
}

// A per-run sandbox's init survives the same queued fault signals
// (SI_QUEUE) from its workload: the run ends as the workload does (by a
// signal init forwards to it, such as SIGHUP), not killed with the
// namespace when init crashes.
func TestPerRunSignalsToInit(t *testing.T) {
	needPureGo(t)
	bin := probeBinary(t)
	plan, _ := persistPlan(t, grantProbe(bin))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := New().Provision(ctx, plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sb.Stop(ctx); _ = sb.Deprovision(ctx) }()
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := runSpec(t, ctx, sb, provider.ExecSpec{Args: probeArgs(bin, "signals")})
	if r.st.Signal == "SIGKILL" || r.st.Reason != "" {
		t.Fatalf("the probe sending queued fault signals to init ended %+v (%v) %s: init crashed and took it along", r.st, r.err, r.stderr)
	}
}

// A start that fails says its code and layer once (the supervisor's
// reply keeps them apart from its message).
func TestPersistentStartErrorOnce(t *testing.T) {
	needPureGo(t)
	t.Setenv(FaultEnv, "landlock")
	plan, _ := persistPlan(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := New().Provision(ctx, plan, provider.ProvisionOptions{Persistent: true, Owner: owner(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sb.Stop(ctx); _ = sb.Deprovision(ctx) }()
	err = sb.Start(ctx)
	if err == nil || strings.Count(err.Error(), "landlock") != 2 || strings.Count(err.Error(), string(provider.CodeStartFailed)) != 1 {
		t.Errorf("Start with landlock failing: %v; want start_failed and the layer said once (the fault names it again)", err)
	}
}
