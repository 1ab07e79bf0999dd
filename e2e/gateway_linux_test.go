//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/gateway"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/provider/linux"
)

// gwProvider is a provider the gateway tests run on: each test body runs
// once per provider (eachGatewayProvider); what differs between them is
// here.
type gwProvider struct {
	name string
	id   *ident // the gateway runs as root
	// pids64 is what the cgroups layer's detail says of process.limits.pids: 64.
	pids64 string
	// execOutlivesCaller: the command of an exec whose caller (the
	// gateway) died runs on. Docker's does (a docker exec is not tied to
	// its client's connection, and the exec's timeout is the caller's to
	// enforce): a gap of the docker provider, reported, not a contract.
	execOutlivesCaller bool
	// workloads lists what the gateway whose files are in dir has on the
	// host, by sandbox id: docker, its containers (running or not);
	// linux, the state directories in its StateBase and the supervisors
	// that run for that StateBase.
	workloads func(t *testing.T, dir string) []string
	// instance names what runs for sandbox id now (docker, the
	// container's id; linux, the supervisor's pid and start time): a
	// sandbox adopted after a restart has the same one, one made again
	// another.
	instance func(t *testing.T, dir, id string) string
	// kill kills sandbox id's workload behind the gateway's back: docker
	// kill; SIGKILL to the linux supervisor (its init dies with it; its
	// cgroup and state directory stay, as after a crash).
	kill func(t *testing.T, dir, id string)
	// policy is the policy of its sandboxes ("": the default).
	policy string
	// env is what its gateway whose files are in dir needs in its
	// environment beyond gatewayEnv (nil: nothing).
	env func(t *testing.T, dir string) []string
	// orphans: a crash during provision can leave an identity the
	// provider cannot name (mxc), which the gateway lists for the
	// operator and never provisions again.
	orphans bool
}

// gwProviders are the providers the gateway tests run on.
var gwProviders = []*gwProvider{
	{name: "linux", pids64: "pids.max=64", workloads: linuxWorkloads, instance: linuxInstance, kill: linuxKill},
	{name: "docker", pids64: "pids 64", execOutlivesCaller: true, workloads: managedContainers, instance: dockerInstance,
		kill: func(t *testing.T, dir, id string) { dockerCLI(t, "kill", id) }},
}

// eachGatewayProvider runs f as a parallel subtest per provider (and per
// one of extra: mxcGW), as root (the gateway runs as root); docker's is
// skipped where no Docker daemon with the base image runs (a failure with
// CORRAL_TEST_DOCKER=1).
func eachGatewayProvider(t *testing.T, f func(t *testing.T, p *gwProvider), extra ...*gwProvider) {
	t.Helper()
	root := gatewayIdent(t)
	for _, p := range append(slices.Clone(gwProviders), extra...) {
		t.Run(p.name, func(t *testing.T) {
			if p.name == "docker" {
				dockerIdents(t)
			}
			t.Parallel()
			q := *p
			q.id = root
			f(t, &q)
		})
	}
}

// req is a create of a sandbox on p with workdir wd.
func (p *gwProvider) req(wd string) *gw.CreateSandboxRequest {
	return &gw.CreateSandboxRequest{Provider: p.name, Workdir: wd, PolicyYaml: p.policy}
}

// dir makes the directory of a gateway's files, and removes at the end
// of the test what the gateway's sandboxes left on the host should the
// test fail before it deletes them (after the gateway is killed:
// cleanups run last first).
func (p *gwProvider) dir(t *testing.T, name string) string {
	t.Helper()
	dir := mkdir(t, p.id, name)
	t.Cleanup(func() { p.sweep(dir) })
	return dir
}

// start starts a gateway on p alone with its files in dir, its linux
// sandboxes' state in a StateBase of its own (linuxStateBase), so that
// what the test finds there and in the supervisors is only its own.
func (p *gwProvider) start(t *testing.T, dir, listen string, env ...string) *gatewayProc {
	t.Helper()
	all := gatewayEnv(dir)
	if p.env != nil {
		all = append(all, p.env(t, dir)...)
	}
	return startGatewayArgs(t, dir, listen, []string{"--provider", p.name}, append(all, env...)...)
}

// gatewayEnv is the environment of a test's gateway whose files are in
// dir: the linux sandboxes' StateBase there.
func gatewayEnv(dir string) []string {
	return []string{linux.StateDirEnv + "=" + linuxStateBase(dir)}
}

// linuxStateBase is where the linux sandboxes of the gateway whose files
// are in dir keep their state.
func linuxStateBase(dir string) string { return filepath.Join(dir, "linux") }

// sweep removes what the gateway in dir left: linux, its supervisors
// stopped (SIGTERM: each removes its cgroup), then the cgroups of the
// sandboxes whose supervisor was killed (their state directories name
// them), what runs in them killed first; docker, its containers.
func (p *gwProvider) sweep(dir string) {
	switch p.name {
	case "linux":
		base := linuxStateBase(dir)
		stopLinuxSupervisors(base)
		ents, _ := os.ReadDir(base)
		var ids []string
		for _, e := range ents {
			ids = append(ids, e.Name())
		}
		loadWalkDirs("/sys/fs/cgroup", 7, func(d string) {
			if slices.Contains(ids, filepath.Base(d)) && filepath.Base(filepath.Dir(d)) == "corral" {
				procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
				for _, f := range strings.Fields(string(procs)) {
					if pid, err := strconv.Atoi(f); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				for end := time.Now().Add(5 * time.Second); syscall.Rmdir(d) == syscall.EBUSY && time.Now().Before(end); {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	case "docker":
		inst, err := os.ReadFile(filepath.Join(dir, "instance"))
		if err != nil {
			return
		}
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=io.corral.managed-by="+strings.TrimSpace(string(inst))).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
	}
}

// stopLinuxSupervisors stops the supervisors of the linux sandboxes in
// StateBase base, as linux Stop does: SIGTERM (each removes its sandbox's
// cgroup), SIGKILL after 15 s.
func stopLinuxSupervisors(base string) {
	for _, pid := range linuxSupervisors(base) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for end := time.Now().Add(15 * time.Second); len(linuxSupervisors(base)) > 0 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	for _, pid := range linuxSupervisors(base) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// linuxSupervisors is the supervisors (corral __corral_persist DIR) of
// the sandboxes in StateBase base: sandbox id → pid.
func linuxSupervisors(base string) map[string]int {
	want := linux.PersistArg + "\x00" + base + "/"
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if _, rest, ok := strings.Cut(string(b), want); ok {
			out[strings.TrimSuffix(rest, "\x00")] = pid
		}
	}
	return out
}

func linuxWorkloads(t *testing.T, dir string) []string {
	t.Helper()
	var ids []string
	ents, err := os.ReadDir(linuxStateBase(dir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	for id := range linuxSupervisors(linuxStateBase(dir)) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// linuxSupervisor is the supervisor sandbox id's state directory names:
// its pid and start time.
func linuxSupervisor(t *testing.T, dir, id string) (pid int, start uint64) {
	t.Helper()
	var sup struct {
		PID   int    `json:"pid"`
		Start uint64 `json:"start_ticks"`
	}
	b, err := os.ReadFile(filepath.Join(linuxStateBase(dir), id, "supervisor.json"))
	if err == nil {
		err = json.Unmarshal(b, &sup)
	}
	if err != nil {
		t.Fatalf("sandbox %s's supervisor: %v", id, err)
	}
	return sup.PID, sup.Start
}

func linuxInstance(t *testing.T, dir, id string) string {
	t.Helper()
	pid, start := linuxSupervisor(t, dir, id)
	if linuxSupervisors(linuxStateBase(dir))[id] != pid {
		return fmt.Sprintf("supervisor %d (started at tick %d) not running", pid, start)
	}
	return fmt.Sprintf("supervisor %d started at tick %d", pid, start)
}

func linuxKill(t *testing.T, dir, id string) {
	t.Helper()
	pid, _ := linuxSupervisor(t, dir, id)
	if linuxSupervisors(linuxStateBase(dir))[id] != pid {
		t.Fatalf("sandbox %s's supervisor %d does not run", id, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); linuxSupervisors(linuxStateBase(dir))[id] == pid; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("sandbox %s's supervisor %d survived SIGKILL", id, pid)
		}
	}
}

func dockerInstance(t *testing.T, dir, id string) string {
	t.Helper()
	return dockerCLI(t, "inspect", "-f", "{{.Id}} {{.State.Status}}", id)
}

// hostTraces is what is on the host of sandboxes ids, of the gateway
// whose files are in dir: state directories named after one (in the
// gateway's linux StateBase, below /run/corral), cgroups named after one
// below a corral cgroup parent, processes whose command line or cgroup
// names one, and mxc records of one (mxcTraces).
func hostTraces(dir string, ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	out := mxcTraces(dir, ids)
	for _, id := range ids {
		if exists(filepath.Join(linuxStateBase(dir), id)) {
			out = append(out, "state dir "+filepath.Join(linuxStateBase(dir), id))
		}
	}
	loadWalkDirs("/run/corral", 3, func(p string) {
		if slices.Contains(ids, filepath.Base(p)) {
			out = append(out, "state dir "+p)
		}
	})
	loadWalkDirs("/sys/fs/cgroup", 7, func(p string) {
		if slices.Contains(ids, filepath.Base(p)) && filepath.Base(filepath.Dir(p)) == "corral" {
			out = append(out, "cgroup "+p)
		}
	})
	return append(out, procsNaming(ids)...)
}

// procsNaming describes the host processes whose command line or cgroup
// has one of names in it.
func procsNaming(names []string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if slices.ContainsFunc(names, func(n string) bool { return bytes.Contains(cg, []byte(n)) || bytes.Contains(cmd, []byte(n)) }) {
			out = append(out, fmt.Sprintf("process %s (%s)", e.Name(), strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))))
		}
	}
	return out
}

// upstream serves body over HTTP on loopback until the test ends; it
// returns the port.
func upstream(t *testing.T, body string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// checkConsistent asserts the gateway's invariants after a restart and
// returns its records by id: no record claims ready for a sandbox that
// does not run, and a ready one runs commands; nothing of the gateway
// (p.workloads) is on the host that no ready record owns; and of every
// sandbox that is not ready — of those on record and of known, the ids
// the test made or deleted — nothing is left on the host (hostTraces,
// awaited for 5 s: what a kill ended may take a moment to go).
func checkConsistent(t *testing.T, ctx context.Context, p *gwProvider, c *gateway.Clients, dir, what string, known ...string) map[string]*gw.Sandbox {
	t.Helper()
	resp, err := c.ListSandboxes(ctx, connect.NewRequest(&gw.ListSandboxesRequest{}))
	if err != nil {
		t.Fatalf("%s: list: %v", what, err)
	}
	workloads := p.workloads(t, dir)
	recs := map[string]*gw.Sandbox{}
	for _, s := range resp.Msg.Sandboxes {
		recs[s.Id] = s
		switch s.Phase {
		case "ready":
			if !slices.Contains(workloads, s.Id) {
				t.Errorf("%s: %s is ready but nothing of it is on the host", what, s.Id)
			} else if out, code, err := execOut(ctx, c, s.Id, "echo", "alive"); err != nil || code != 0 || !strings.Contains(out, "alive") {
				t.Errorf("%s: %s is ready but does not run commands: %q %d %v", what, s.Id, out, code, err)
			}
		case "provisioning", "stopping", "deleting":
			t.Errorf("%s: %s left in %s after reconciliation", what, s.Id, s.Phase)
		}
	}
	for _, id := range workloads {
		if r := recs[id]; r == nil || r.Phase != "ready" {
			t.Errorf("%s: sandbox %s is on the host without a ready record (%v)", what, id, r.GetPhase())
		}
	}
	var gone []string // what may leave no trace
	for _, id := range known {
		if recs[id] == nil {
			gone = append(gone, id)
		}
	}
	for id, r := range recs {
		if r.Phase != "ready" {
			gone = append(gone, id)
		}
	}
	var left []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = hostTraces(dir, gone); len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("%s: left of a sandbox that is not ready: %s", what, l)
	}
	return recs
}
