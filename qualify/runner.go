//go:build linux

package qualify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/term"

	"github.com/corral-sandbox/corral/internal/execfile"
	"github.com/corral-sandbox/corral/probe"
)

// CaseTimeout bounds one case. A case still running then is reported as
// failed and abandoned (its context is cancelled, which kills its corral
// processes).
var CaseTimeout = 90 * time.Second

// KnownProviders are the provider names qualify accepts; "all" means all
// of them but LinuxService and LinuxGateway (front ends on the linux
// provider, qualified when named). A provider that the binary under test
// does not have is reported with every case skipped ("provider not built
// in"), never as passed.
var KnownProviders = []string{"linux", "docker", "mxc", LinuxService, LinuxGateway}

// LinuxService qualifies service sessions: the linux provider's sandbox
// as corral service builds it (an agent user, a session home, the
// supervisor), each case's command run with corral service run. Only the
// cases in ServiceCases apply.
const LinuxService = "linux-service"

// ServiceCases are the cases of ADVERSARIAL.md a service session must
// defeat (issue: `corral service`, "Checks that must hold").
var ServiceCases = []string{"P01", "P02", "P03", "P04", "P05", "P06", "P09", "P12", "P18", "P25", "P26", "P27", "P28", "P29", "P30", "P31", "P32"}

// baseProvider is the provider a qualify target runs on.
func baseProvider(name string) string {
	if name == LinuxService || name == LinuxGateway {
		return "linux"
	}
	return name
}

// hostPath is the PATH corral itself runs with.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ---- registry ----

var (
	regMu    sync.Mutex
	registry = map[string]Case{}
)

// Register adds a case to the suite. The cases files call it from init().
// It panics on an empty or duplicate ID or a nil Run: those are bugs.
func Register(c Case) {
	regMu.Lock()
	defer regMu.Unlock()
	if c.ID == "" || c.Run == nil {
		panic(fmt.Sprintf("qualify.Register: case %q needs an ID and a Run", c.ID))
	}
	if _, dup := registry[c.ID]; dup {
		panic("qualify.Register: duplicate case " + c.ID)
	}
	registry[c.ID] = c
}

// Cases returns the registered cases sorted by ID.
func Cases() []Case {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]Case, 0, len(registry))
	for _, id := range slices.Sorted(maps.Keys(registry)) {
		out = append(out, registry[id])
	}
	return out
}

// hostWide is held by the cases that bind fixed host addresses or measure
// the whole host (P05, P12, P21), so that Qualify calls running at once in
// one process (the e2e suite: providers and users side by side) do not
// disturb each other.
var hostWide sync.Mutex

// caseSet is the case list Qualify runs; tests replace it with fake cases.
var caseSet = Cases

// ---- options and the run ----

// Options configures Qualify.
type Options struct {
	Bin       string   // the corral binary under test; default: this executable
	Providers []string // provider names or "all"; default: linux
	Cases     []string // case IDs; default: every registered case
	Out       string   // when set, Qualify writes report.json/.md/.html there
	Strict    bool     // a skip is a failure
	// Progress receives progress: a one-line bar when it is a terminal,
	// one line per case otherwise. nil: silent.
	Progress io.Writer
	PerfRuns int // repetitions for the performance medians; 0: 15; <0: no perf section
	// User, when set, is who runs corral instead of the caller (which must
	// be root for another uid): the cases qualify what that user gets.
	User *Identity
}

// Identity is a user corral runs as (Options.User). It also runs the host
// commands a case runs in the user's place (a shell on a terminal, git in
// a tree the workload wrote), and owns the case's files.
type Identity struct {
	UID, GID int
	Groups   []uint32 // supplementary groups (e.g. docker's); none when empty
}

// runState is one Qualify call's shared state.
type runState struct {
	opts      Options
	tmp       string          // the run's temp dir (0755)
	bin       string          // the copy of the binary under test, in tmp/bin
	root      bool            // corral runs as root
	hostRoot  bool            // qualify itself runs as root
	cgroupsOK map[string]bool // provider -> cgroups usable by this user
	mu        sync.Mutex
	policies  map[string]PolicyRecord
	// gw is the run's gateway while LinuxGateway is qualified (gateway.go),
	// gwHome its HOME, which is every LinuxGateway case's Env.Home.
	gw     *gatewayProc
	gwHome string
}

// caseState is one case's bookkeeping, reached through Env.st.
type caseState struct {
	run       *runState
	caseID    string
	prefix    string // of the case's unique names (Env.uniqueName)
	mu        sync.Mutex
	nPolicy   int
	policies  map[string]string // policy text -> its file
	listeners []*Listener
	markers   []string
	started   []*Running
	gateway   gatewayCase // LinuxGateway's sandboxes and gateways (gateway.go)
}

// Qualify runs the selected cases against the selected providers and
// returns the report (also written to o.Out when set). The error is for a
// suite that could not run at all (bad options, no binary); failed cases
// are in the report: see Report.OK and Report.ExitCode.
func Qualify(ctx context.Context, o Options) (*Report, error) {
	if o.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("the corral binary: %w", err)
		}
		o.Bin = exe
	}
	bin, err := filepath.Abs(o.Bin)
	if err != nil {
		return nil, err
	}
	o.Bin = bin
	if u := o.User; u != nil && u.UID != os.Geteuid() && os.Geteuid() != 0 {
		return nil, fmt.Errorf("running corral as uid %d needs root", u.UID)
	}
	if o.PerfRuns == 0 {
		o.PerfRuns = 15
	}
	provs, err := selectProviders(o.Providers)
	if err != nil {
		return nil, err
	}
	cases, err := selectCases(caseSet(), o.Cases)
	if err != nil {
		return nil, err
	}
	sum, err := fileSHA256(o.Bin)
	if err != nil {
		return nil, fmt.Errorf("the corral binary: %w", err)
	}

	tmp, err := os.MkdirTemp("", "corral-qualify-")
	if err != nil {
		return nil, err
	}
	defer removeAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	// The sandbox runs a copy in a 0755 directory: the binary's own
	// directory may not be reachable for the sandbox's user (/root/go/bin).
	rs := &runState{opts: o, tmp: tmp, root: os.Geteuid() == 0, hostRoot: os.Geteuid() == 0, cgroupsOK: map[string]bool{}, policies: map[string]PolicyRecord{}}
	if o.User != nil {
		rs.root = o.User.UID == 0
	}
	if err := os.Mkdir(filepath.Join(tmp, "bin"), 0o755); err != nil {
		return nil, err
	}
	rs.bin = filepath.Join(tmp, "bin", "corral")
	if err := execfile.Copy(o.Bin, rs.bin, 0o755); err != nil {
		return nil, fmt.Errorf("copy the corral binary: %w", err)
	}

	rep := &Report{
		SchemaVersion: SchemaVersion,
		Date:          time.Now().UTC().Truncate(time.Second),
		Host:          hostInfo(),
		Binary:        BinaryInfo{Path: o.Bin, SHA256: sum},
		Strict:        o.Strict,
	}
	if o.User != nil {
		rep.Host.UID = o.User.UID
	}
	ver, verErr := rs.binVersion(ctx)
	rep.Binary.Version = ver.String()
	doc := rs.binDoctor(ctx)

	prog := newProgress(o.Progress, len(provs) > 1)
	total := 0
	for _, p := range provs {
		switch {
		case !slices.Contains(ver.Providers, baseProvider(p)):
		case p == LinuxService && len(o.Cases) == 0:
			total += len(ServiceCases)
		default:
			total += len(cases)
		}
	}
	prog.total = total

	for _, name := range provs {
		pr := ProviderReport{Name: name, Version: rep.Binary.Version}
		avail, why := true, ""
		switch dp, ok := doc.provider(baseProvider(name)); {
		case verErr != nil:
			avail, why = false, "not available: the runner could not run the binary: "+verErr.Error()
		case !slices.Contains(ver.Providers, baseProvider(name)):
			avail, why = false, "provider not built in"
		case !ok:
			avail, why = false, "not available: corral doctor does not report it"
		case !dp.Available:
			avail, why = false, "not available: "+dp.Reason
		default:
			pr.Facts = dp.Facts
			pr.Mock = dp.Facts["tier"] == "mock"
			rs.cgroupsOK[name] = dp.layerAvailable("cgroups")
		}
		cases := cases
		if name == LinuxService && len(o.Cases) == 0 {
			cases = slices.DeleteFunc(slices.Clone(cases), func(c Case) bool { return !slices.Contains(ServiceCases, c.ID) })
		}
		if !avail {
			pr.Skipped = why
			prog.line(fmt.Sprintf("%s: every case skipped: %s", name, why))
			for _, c := range cases {
				pr.Results = append(pr.Results, applyStrict(Result{ID: c.ID, Title: c.Title, Provider: name, Status: Skipped, Reason: why, Evidence: []Evidence{}}, o.Strict))
			}
		} else {
			// The gateway's cases run in sandboxes of one gateway of the
			// run's own (a broken gateway fails every case: nothing can be
			// qualified through it).
			var gwErr error
			if name == LinuxGateway {
				gwErr = rs.startRunGateway(ctx)
			}
			for _, c := range cases {
				if ctx.Err() != nil {
					pr.Results = append(pr.Results, applyStrict(Result{ID: c.ID, Title: c.Title, Provider: name, Status: Skipped, Reason: "not run: qualify was interrupted", Evidence: []Evidence{}}, o.Strict))
					continue
				}
				if gwErr != nil {
					pr.Results = append(pr.Results, Result{ID: c.ID, Title: c.Title, Provider: name, Status: Fail, Reason: "runner: the run's gateway did not start: " + gwErr.Error(),
						Evidence: []Evidence{{Attempt: "runner: start corral gateway serve --provider linux", Got: bound(gwErr.Error(), 2000)}}})
					continue
				}
				prog.start(name, c)
				res := rs.runCase(ctx, name, c)
				prog.done(res)
				pr.Results = append(pr.Results, res)
			}
			if o.PerfRuns > 0 && ctx.Err() == nil && gwErr == nil {
				prog.line(name + ": performance (" + strconv.Itoa(o.PerfRuns) + " runs each)")
				pr.Perf = rs.perf(ctx, name)
			}
			if name == LinuxGateway && gwErr == nil {
				// What the gateway's stop and its sandboxes left is the
				// run's: it goes on the last case's result.
				ev, problem := rs.stopRunGateway()
				if n := len(pr.Results); n > 0 {
					last := &pr.Results[n-1]
					last.Evidence = append(last.Evidence, ev)
					if problem != "" {
						last.Status = Fail
						last.Reason = joinReason(last.Reason, "gateway: "+problem)
					}
				}
			}
		}
		if pr.Mock {
			for i := range pr.Results {
				pr.Results[i].Reason = strings.TrimSuffix(MockNote+": "+pr.Results[i].Reason, ": ")
			}
		}
		pr.Summary = summarize(pr.Results)
		rep.Providers = append(rep.Providers, pr)
	}
	prog.finish()
	rep.Policies = rs.policies
	if o.Out != "" {
		if err := rep.WriteFiles(o.Out); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

func selectProviders(names []string) ([]string, error) {
	if len(names) == 0 {
		return []string{"linux"}, nil
	}
	var out []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "all": // the providers; service sessions and gateway sandboxes only when named
			for _, k := range KnownProviders {
				if k != LinuxService && k != LinuxGateway && !slices.Contains(out, k) {
					out = append(out, k)
				}
			}
		case slices.Contains(KnownProviders, n):
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		default:
			return nil, fmt.Errorf("unknown provider %q: use %s or all", n, strings.Join(KnownProviders, ", "))
		}
	}
	return out, nil
}

func selectCases(all []Case, ids []string) ([]Case, error) {
	if len(all) == 0 {
		return nil, errors.New("no cases are registered in this build")
	}
	if len(ids) == 0 {
		return all, nil
	}
	var out []Case
	for _, id := range ids {
		id = strings.ToUpper(strings.TrimSpace(id))
		i := slices.IndexFunc(all, func(c Case) bool { return c.ID == id })
		if i < 0 {
			var known []string
			for _, c := range all {
				known = append(known, c.ID)
			}
			return nil, fmt.Errorf("unknown case %q (known: %s)", id, strings.Join(known, ","))
		}
		if !slices.ContainsFunc(out, func(c Case) bool { return c.ID == id }) {
			out = append(out, all[i])
		}
	}
	slices.SortFunc(out, func(a, b Case) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// applyStrict turns a skip into a failure under --strict.
func applyStrict(r Result, strict bool) Result {
	if strict && r.Status == Skipped {
		r.Status = Fail
		r.Reason = "strict: " + r.Reason
	}
	return r
}

// runCase runs one case in a fresh Env and cleans up after it.
func (rs *runState) runCase(ctx context.Context, provider string, c Case) Result {
	start := time.Now()
	base := Result{ID: c.ID, Title: c.Title, Provider: provider, Evidence: []Evidence{}}
	e, err := rs.newEnv(provider, c.ID)
	if err != nil {
		base.Status, base.Reason = Fail, "runner: make the case environment: "+err.Error()
		return base
	}
	res := rs.runInEnv(ctx, e, c, base)
	reason := e.cleanup()
	// Which sandboxes of which gateway the case ran in, and what their
	// delete left (LinuxGateway).
	res.Evidence = append(res.Evidence, e.st.gateway.evidence...)
	if reason != "" {
		res.Evidence = append(res.Evidence, Evidence{Attempt: "runner: clean up after the case", Got: reason})
		res.Status = Fail
		res.Reason = joinReason(res.Reason, "cleanup: "+reason)
	}
	res.ID, res.Title, res.Provider = c.ID, c.Title, provider
	if res.Evidence == nil {
		res.Evidence = []Evidence{}
	}
	res.Duration = time.Since(start).Round(time.Millisecond)
	return applyStrict(res, rs.opts.Strict)
}

func (rs *runState) runInEnv(ctx context.Context, e *Env, c Case, base Result) (res Result) {
	if c.Applies != nil {
		ok, why := safeApplies(c, e)
		if !ok {
			if strings.TrimSpace(why) == "" {
				why = "does not apply here (the case gave no reason)"
			}
			base.Status, base.Reason = Skipped, why
			return base
		}
	}
	cctx, cancel := context.WithTimeout(ctx, CaseTimeout)
	defer cancel()
	done := make(chan Result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r := base
				r.Status = Fail
				r.Reason = fmt.Sprintf("panic: %v", p)
				r.Evidence = append(r.Evidence, Evidence{Attempt: "run the case", Got: bound(fmt.Sprintf("panic: %v\n%s", p, debug.Stack()), 4000)})
				done <- r
			}
		}()
		done <- c.Run(cctx, e)
	}()
	select {
	case res = <-done:
	case <-cctx.Done():
		// Give the case a moment to notice and return what it has.
		select {
		case res = <-done:
		case <-time.After(10 * time.Second):
			res = base
			res.Status, res.Reason = Fail, fmt.Sprintf("case did not finish within %s (%v)", CaseTimeout, cctx.Err())
			return res
		}
		if ctx.Err() == nil && res.Status != Fail {
			res.Status = Fail
			res.Reason = joinReason(res.Reason, fmt.Sprintf("case did not finish within %s", CaseTimeout))
		}
	}
	switch res.Status {
	case Pass, Fail, Skipped:
	case "":
		// Checks only ever fail a result: a case that checked something
		// and failed nothing passed; one that checked nothing did not.
		if len(res.Evidence) == 0 {
			res.Status, res.Reason = Fail, joinReason(res.Reason, "the case checked nothing (no evidence)")
		} else {
			res.Status = Pass
		}
	default:
		res.Reason = joinReason(res.Reason, fmt.Sprintf("unknown status %q", res.Status))
		res.Status = Fail
	}
	if res.Status == Pass && len(res.Evidence) == 0 {
		res.Status, res.Reason = Fail, "the case checked nothing (no evidence)"
	}
	if res.Status != Pass && strings.TrimSpace(res.Reason) == "" {
		res.Reason = "(the case gave no reason)"
	}
	return res
}

func safeApplies(c Case, e *Env) (ok bool, why string) {
	defer func() {
		if p := recover(); p != nil {
			ok, why = false, fmt.Sprintf("Applies panicked: %v", p)
		}
	}()
	return c.Applies(e)
}

// newEnv makes a case's directory, home and canaries.
func (rs *runState) newEnv(provider, caseID string) (*Env, error) {
	dir, err := os.MkdirTemp(rs.tmp, provider+"-"+caseID+"-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if provider == LinuxGateway && rs.gwHome != "" {
		// A gateway sandbox's home is the gateway's (its HOME, hidden by an
		// empty private one inside): the canaries go there, fresh.
		home = rs.gwHome
		if err := emptyDir(home); err != nil {
			return nil, err
		}
	}
	e := &Env{
		Provider: provider,
		Bin:      rs.bin,
		Dir:      dir,
		Home:     home,
		Tokens:   map[string]string{},
		Root:     rs.root,
		Strict:   rs.opts.Strict,
		st:       &caseState{run: rs, caseID: caseID, prefix: "corral-q-" + strings.ToLower(caseID) + "-" + randHex(3) + "-"},
	}
	for _, rel := range CanaryFiles {
		tok := "canary-" + randHex(12)
		p := filepath.Join(e.Home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			return nil, err
		}
		e.Tokens[rel] = tok
	}
	if err := os.Chmod(filepath.Join(e.Home, ".ssh"), 0o700); err != nil {
		return nil, err
	}
	return e, nil
}

// CanaryFiles are the files of every Env.Home, relative to it; each holds
// a random token (Env.Tokens).
var CanaryFiles = []string{".ssh/id_test", ".aws/credentials", ".bashrc", ".mozilla/firefox/profile/cookies.sqlite", ".config/google-chrome/Default/Cookies"}

// uniqueName returns a fresh name ("corral-q-p09-RUN-HEX": the case, and
// this case run, so that Qualify calls at once do not take each other's)
// for the case's processes, sockets and files; the runner looks for it in
// surviving processes after the case.
func (e *Env) uniqueName() string { return e.st.prefix + randHex(6) }

// cleanup closes the case's listeners, makes sure nothing it started is
// still running (processes whose command line names the case dir, one of
// its markers or the prefix of its unique names: given 3 s, then killed,
// and reported) and removes its dir.
// It returns what was wrong, or "".
func (e *Env) cleanup() string {
	st := e.st
	var problems []string
	if e.Provider == LinuxGateway {
		// Its sandboxes deleted and checked, its own gateways stopped,
		// before anything of the case is looked for or removed.
		problems = append(problems, e.gatewayCleanup()...)
	}
	st.mu.Lock()
	ls, started := st.listeners, st.started
	markers := slices.DeleteFunc(append([]string{e.Dir, st.prefix}, st.markers...), func(m string) bool { return m == "" })
	st.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, r := range started {
		r.abandon()
	}
	deadline := time.Now().Add(3 * time.Second)
	var left []int
	for {
		left = left[:0]
		for _, m := range markers {
			for _, p := range procsWith(m, true) {
				if !slices.Contains(left, p) {
					left = append(left, p)
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		var desc []string
		for _, p := range left {
			desc = append(desc, fmt.Sprintf("%d %q", p, cmdline(p)))
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		problems = append(problems, "processes left behind (killed): "+strings.Join(desc, ", "))
	}
	if err := removeAll(e.Dir); err != nil {
		problems = append(problems, "remove the case dir: "+err.Error())
	}
	if e.Home != filepath.Join(e.Dir, "home") {
		if err := emptyDir(e.Home); err != nil {
			problems = append(problems, "empty the home: "+err.Error())
		}
	}
	return strings.Join(problems, "; ")
}

// emptyDir removes what is in dir (removeAll, so read-only directories
// too), leaving dir.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if err := removeAll(filepath.Join(dir, ent.Name())); err != nil {
			return err
		}
	}
	return nil
}

// removeAll removes dir, making read-only directories writable first when
// a plain RemoveAll fails.
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// ---- Env methods for the cases ----

// TempDir makes a fresh 0755 directory named name-XXXX in the case dir.
func (e *Env) TempDir(name string) string {
	d, err := os.MkdirTemp(e.Dir, name+"-")
	if err != nil {
		panic(fmt.Sprintf("TempDir(%q): %v", name, err))
	}
	if err := os.Chmod(d, 0o755); err != nil {
		panic(fmt.Sprintf("TempDir(%q): %v", name, err))
	}
	return d
}

// dockerOwner is the uid and gid that own a case's files when root
// qualifies the docker provider: Docker has no idmapped mounts, so a
// root-owned read-write grant is not writable by the workload (never
// root); with the workdir owned by nobody the workload runs as nobody, as
// it does for a user's own project.
const dockerOwner = 65534

// handOver gives path (and what is below it) to the user corral runs as
// when that is not the caller (Options.User), or to dockerOwner when root
// qualifies the docker provider; otherwise it does nothing. The command
// builders call it on the case dir before every corral run.
func (e *Env) handOver(path string) {
	uid, gid, ok := e.owner()
	if !ok {
		return
	}
	_ = filepath.WalkDir(path, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			err = os.Lchown(p, uid, gid)
		}
		if err != nil {
			panic(fmt.Sprintf("hand %s to uid %d: %v", p, uid, err))
		}
		return nil
	})
}

// owner is who the case's files are handed to (handOver), if anyone.
func (e *Env) owner() (uid, gid int, ok bool) {
	var u *Identity
	if e.st != nil {
		u = e.st.run.opts.User
	}
	switch {
	case u != nil && u.UID != 0:
		return u.UID, u.GID, true
	case e.Provider == "docker" && e.Root:
		return dockerOwner, dockerOwner, true
	}
	return 0, 0, false
}

// asUser makes cmd, a host command a case runs in the user's place, run as
// Options.User when set.
func (e *Env) asUser(cmd *exec.Cmd) {
	if e.st != nil {
		e.st.run.asUser(cmd)
	}
}

// WriteFile writes content to path (creating parent dirs 0755) with mode.
// It panics on error (the runner turns a panic into a failed result).
func (e *Env) WriteFile(path, content string, mode os.FileMode) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		panic(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		panic(err)
	}
}

// Marker returns a fresh unique string for the case to put in the command
// lines of what it starts (e.g. `sleep <Marker>`: it is a valid sleep
// argument, about 1000 s), so that ProcsWith finds them; the runner kills
// and reports anything still carrying a marker after the case.
func (e *Env) Marker() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := (int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])) % 1000000
	m := fmt.Sprintf("1%03d.%06d", n%1000, n)
	e.AddMarker(m)
	return m
}

// AddMarker registers a string the runner checks for in the command lines
// of surviving processes after the case.
func (e *Env) AddMarker(m string) {
	e.st.mu.Lock()
	e.st.markers = append(e.st.markers, m)
	e.st.mu.Unlock()
}

// ProcsWith returns the host pids whose command line contains marker,
// other than this process, corral supervisors (`corral run ...` and
// `corral service run ...`, whose command line names the workload) and
// gateway clients (`corral sandbox exec ...`, likewise).
func (e *Env) ProcsWith(marker string) []int { return procsWith(marker, false) }

// WaitNoProcs polls until no process carries marker (ProcsWith) and
// returns the ones still there after d.
func (e *Env) WaitNoProcs(marker string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		ps := procsWith(marker, false)
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eachProc calls f with each host process's pid and command line (not
// this process's, nor a kernel thread's).
func eachProc(f func(pid int, argv []string)) {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		f(pid, strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"))
	}
}

func procsWith(marker string, withSupervisors bool) []int {
	var out []int
	eachProc(func(pid int, argv []string) {
		if !withSupervisors && filepath.Base(argv[0]) == "corral" && len(argv) > 1 && (argv[1] == "run" || argv[1] == "sandbox" || len(argv) > 2 && argv[1] == "service" && argv[2] == "run") {
			return
		}
		if strings.Contains(strings.Join(argv, " "), marker) {
			out = append(out, pid)
		}
	})
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// Check records one attempt and what came back as evidence, and fails r
// with whyFail unless ok. got is bounded to 2000 bytes.
func (e *Env) Check(r *Result, attempt, got string, ok bool, whyFail string) {
	r.Evidence = append(r.Evidence, Evidence{Attempt: attempt, Got: bound(got, 2000)})
	if !ok {
		r.Status = Fail
		r.Reason = joinReason(r.Reason, whyFail)
	}
}

// CheckNoCanary fails r when any of the Env's canary tokens (or extra
// tokens) appears in out.
func (e *Env) CheckNoCanary(r *Result, attempt, out string, extra ...string) {
	var leaked []string
	for _, rel := range slices.Sorted(maps.Keys(e.Tokens)) {
		if strings.Contains(out, e.Tokens[rel]) {
			leaked = append(leaked, "HOME/"+rel)
		}
	}
	for _, t := range extra {
		if t != "" && strings.Contains(out, t) {
			leaked = append(leaked, "token "+t)
		}
	}
	got := "no canary token in the output"
	if len(leaked) > 0 {
		got = "canary leaked: " + strings.Join(leaked, ", ") + "\n" + out
	}
	e.Check(r, attempt, got, len(leaked) == 0, "canary token leaked: "+strings.Join(leaked, ", "))
}

// Skip marks r skipped with why (a failure under --strict, by the runner).
func (e *Env) Skip(r *Result, why string) {
	r.Status = Skipped
	r.Reason = why
}

func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "" || strings.Contains(a, b):
		return a
	}
	return a + "; " + b
}

func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d more bytes)", len(s)-n)
}

// ---- policies ----

// systemRO and systemDeny are policy/default.yaml's lists.
var (
	systemRO   = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/usr/local"}
	systemDeny = []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh"}
)

// PolicyPath writes policy text to a file in the case dir (one file per
// distinct text), records its hash and text in the report, and returns its
// path. Corral does it for Run.Policy; use it for policies passed some
// other way.
func (e *Env) PolicyPath(text string) string {
	st := e.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if p, ok := st.policies[text]; ok {
		return p
	}
	st.nPolicy++
	name := fmt.Sprintf("policy-%d.yaml", st.nPolicy)
	p := filepath.Join(e.Dir, name)
	e.WriteFile(p, text, 0o644)
	if st.policies == nil {
		st.policies = map[string]string{}
	}
	st.policies[text] = p
	st.run.recordPolicy(e.Provider+"/"+st.caseID+"/"+name, text)
	return p
}

func (rs *runState) recordPolicy(key, text string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	sum := sha256.Sum256([]byte(text))
	rs.policies[key] = PolicyRecord{SHA256: hex.EncodeToString(sum[:]), Text: text}
}

// ---- running corral ----

// Running is a corral run started in the background (Env.Start).
type Running struct {
	Cmd      *exec.Cmd
	run      Run
	stdout   *bytes.Buffer
	stderr   *bytes.Buffer
	start    time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	waitOnce sync.Once
	out      Outcome
	err      error
	// LinuxGateway: refused is the outcome of a `corral sandbox create`
	// that failed (Cmd, then, is that create, and nothing else ran);
	// after deletes the sandbox once its exec has ended.
	refused *Outcome
	after   func()
}

// Pid is the corral supervisor's pid (LinuxGateway: the `corral sandbox
// exec` client's), 0 when none started.
func (r *Running) Pid() int {
	if r.Cmd == nil || r.Cmd.Process == nil {
		return 0
	}
	return r.Cmd.Process.Pid
}

// Signal sends sig to the corral supervisor (LinuxGateway: the `corral
// sandbox exec` client).
func (r *Running) Signal(sig os.Signal) error {
	if r.Cmd == nil || r.Cmd.Process == nil {
		return errors.New("no corral process was started")
	}
	return r.Cmd.Process.Signal(sig)
}

// Wait waits for corral to exit (or Run.Timeout to pass: then it is
// killed and the error says so) and returns what it did.
func (r *Running) Wait() (Outcome, error) {
	r.waitOnce.Do(func() {
		if r.refused != nil {
			r.out = *r.refused
			if r.after != nil {
				r.after()
			}
			r.cancel()
			return
		}
		err := r.Cmd.Wait()
		r.out = Outcome{Stdout: r.stdout.String(), Stderr: r.stderr.String(), Elapsed: time.Since(r.start)}
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			r.out.Code = exitCode(ee.ProcessState)
		default:
			r.err = err
		}
		if r.ctx.Err() != nil {
			r.err = fmt.Errorf("corral did not finish within %s (killed): %v", r.run.Timeout, r.ctx.Err())
		}
		r.cancel()
		if r.after != nil {
			r.after()
		}
		if len(r.run.Probe) > 0 {
			r.out.Report = parseProbe(r.out.Stdout)
		}
	})
	return r.out, r.err
}

// abandon kills a run the case left running and reaps it.
func (r *Running) abandon() {
	r.cancel()
	_, _ = r.Wait()
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// parseProbe parses the probe report on the last non-empty stdout line.
func parseProbe(stdout string) *probe.Report {
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		var rep probe.Report
		if json.Unmarshal([]byte(l), &rep) != nil || rep.Probe == "" {
			return nil
		}
		return &rep
	}
	return nil
}

// Command builds the corral invocation for r: `Bin run --provider P
// [--policy FILE] -C WORKDIR [FLAGS] -- (Bin __probe PROBE... | ARGS...)`
// with PATH, HOME=e.Home, LANG=C and r.Env, run from the case dir.
//
// LinuxGateway has no one command for a Run (create, exec, delete): it
// panics there (a failed case); use Start or Corral.
func (e *Env) Command(ctx context.Context, r Run) *exec.Cmd {
	if e.Provider == LinuxGateway {
		panic("qualify: Env.Command: a run through the gateway is three commands (sandbox create, exec, delete): use Start or Corral")
	}
	args := e.runArgs()
	if r.Policy != "" {
		args = append(args, "--policy", e.PolicyPath(r.Policy))
	}
	wd := r.Workdir
	if wd == "" {
		wd = e.TempDir("work")
	}
	args = append(args, "-C", wd)
	args = append(args, r.Flags...)
	e.handOver(e.Dir) // after the workdir is made: it too
	args = append(args, "--")
	args = append(args, e.argv(r)...)
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Env = append(append([]string{"PATH=" + hostPath, "HOME=" + e.Home, "LANG=C"}, providerEnv()...), r.Env...)
	cmd.Dir = e.Dir
	cmd.WaitDelay = 5 * time.Second
	e.asUser(cmd)
	if r.Stdin != "" {
		cmd.Stdin = strings.NewReader(r.Stdin)
	}
	return cmd
}

// argv is the command r runs in the sandbox: `Bin __probe PROBE...` or
// its Args.
func (e *Env) argv(r Run) []string {
	if len(r.Probe) > 0 {
		return append([]string{e.Bin, probe.Arg}, r.Probe...)
	}
	return r.Args
}

// runArgs starts a corral invocation that runs one command: corral run
// --provider P, or for LinuxService corral service run (LinuxGateway has
// none: gateway.go).
func (e *Env) runArgs() []string {
	if e.Provider == LinuxService {
		return []string{"service", "run"}
	}
	return []string{"run", "--provider", e.Provider}
}

// Start starts r in the background; Wait for it. The runner kills and
// reaps whatever the case leaves running.
func (e *Env) Start(ctx context.Context, r Run) (*Running, error) {
	if (len(r.Probe) > 0) == (len(r.Args) > 0) {
		return nil, errors.New("qualify.Run: set exactly one of Probe and Args")
	}
	if r.Timeout == 0 {
		r.Timeout = 60 * time.Second
	}
	if e.Provider == LinuxGateway {
		return e.gatewayStart(ctx, r, nil)
	}
	rctx, cancel := context.WithTimeout(ctx, r.Timeout)
	cmd := e.Command(rctx, r)
	run := &Running{Cmd: cmd, run: r, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, ctx: rctx, cancel: cancel}
	return e.start(run)
}

// start starts run.Cmd with its output into run's buffers, for the runner
// to reap after the case.
func (e *Env) start(run *Running) (*Running, error) {
	run.Cmd.Stdout, run.Cmd.Stderr = run.stdout, run.stderr
	run.start = time.Now()
	if err := run.Cmd.Start(); err != nil {
		run.cancel()
		return nil, err
	}
	e.st.mu.Lock()
	e.st.started = append(e.st.started, run)
	e.st.mu.Unlock()
	return run, nil
}

// Corral runs r and waits for it. The error is for corral not running or
// not finishing within r.Timeout (default 60 s); a non-zero exit is in
// Outcome.Code. With r.Probe, Outcome.Report is the probe's report (nil
// when the last stdout line is not one: e.g. the run was refused).
func (e *Env) Corral(ctx context.Context, r Run) (Outcome, error) {
	run, err := e.Start(ctx, r)
	if err != nil {
		return Outcome{Code: -1}, err
	}
	return run.Wait()
}

// String is a bounded one-block summary of o for evidence.
func (o Outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit %d after %s", o.Code, o.Elapsed.Round(time.Millisecond))
	if s := strings.TrimSpace(o.Stdout); s != "" {
		fmt.Fprintf(&b, "\nstdout: %s", bound(s, 1500))
	}
	if s := strings.TrimSpace(o.Stderr); s != "" {
		fmt.Fprintf(&b, "\nstderr: %s", bound(s, 1500))
	}
	return b.String()
}

// Result returns the probe result whose What is what (or, when none is,
// the first one starting with what).
func (o Outcome) Result(what string) (probe.Result, bool) {
	if o.Report == nil {
		return probe.Result{}, false
	}
	for _, r := range o.Report.Results {
		if r.What == what {
			return r, true
		}
	}
	for _, r := range o.Report.Results {
		if strings.HasPrefix(r.What, what) {
			return r, true
		}
	}
	return probe.Result{}, false
}

// SystemPolicy returns a policy for a case: extraYAML (the case's own
// policy, a YAML mapping with any of version, filesystem, network,
// process, layers; "" for none) merged onto these defaults:
//
//   - filesystem.read_only: the system directories of the built-in default
//     (each optional) and the directory of the corral binary (so that
//     `corral __probe` runs); the case's read_only list is appended.
//   - filesystem.deny: the built-in default's credential files (each
//     optional); the case's deny list is appended.
//   - process.limits.timeout: 60s (for LinuxGateway, each exec's).
//   - layers.cgroups: optional when cgroups are not usable by this
//     (unprivileged) user on this host, as corral doctor reports; left
//     required otherwise and always as root.
//
// Every other key the case gives replaces the default's (mappings merge
// key by key; lists and scalars replace; a key with an empty value, such
// as a bare "filesystem:", changes nothing). The result is YAML. It panics
// when extraYAML is not a YAML mapping (a bug in the case; the runner
// reports it as a failure).
func (e *Env) SystemPolicy(extraYAML string) string {
	ro := []any{}
	for _, d := range systemRO {
		ro = append(ro, map[string]any{"path": d, "optional": true})
	}
	ro = append(ro, filepath.Dir(e.Bin))
	deny := []any{}
	for _, d := range systemDeny {
		deny = append(deny, map[string]any{"path": d, "optional": true})
	}
	base := map[string]any{
		"version":    1,
		"filesystem": map[string]any{"read_only": ro, "deny": deny},
		"process":    map[string]any{"limits": map[string]any{"timeout": "60s"}},
	}
	if !e.Root && e.st != nil && !e.st.run.cgroupsOK[e.Provider] {
		base["layers"] = map[string]any{"cgroups": "optional"}
	}
	if strings.TrimSpace(extraYAML) != "" {
		extra, err := parseYAMLMap(extraYAML)
		if err != nil {
			panic(fmt.Sprintf("SystemPolicy: the case's YAML: %v", err))
		}
		if fs, ok := extra["filesystem"].(map[string]any); ok {
			bfs := base["filesystem"].(map[string]any)
			for _, k := range []string{"read_only", "deny"} {
				if l, ok := fs[k].([]any); ok {
					bfs[k] = append(bfs[k].([]any), l...)
					delete(fs, k)
				}
			}
		}
		mergeMap(base, extra)
	}
	return "# corral qualify: system defaults + the case's policy\n" + marshalYAML(base)
}

func mergeMap(dst, src map[string]any) {
	for k, v := range src {
		if v == nil {
			continue // "key:" with nothing under it changes nothing
		}
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeMap(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// ---- host, binary ----

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// binVersionInfo is `corral version -o json`.
type binVersionInfo struct {
	Version   string   `json:"version"`
	Commit    string   `json:"commit"`
	Go        string   `json:"go"`
	Providers []string `json:"providers"`
}

func (v binVersionInfo) String() string {
	if v.Version == "" {
		return "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s)", v.Version, v.Commit, v.Go)
}

func (rs *runState) binVersion(ctx context.Context) (binVersionInfo, error) {
	var v binVersionInfo
	out, err := rs.runQuiet(ctx, "version", "-o", "json")
	if err == nil {
		err = json.Unmarshal(out, &v)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, bound(strings.TrimSpace(string(ee.Stderr)), 500))
		}
		return v, fmt.Errorf("corral version -o json: %w", err)
	}
	return v, nil
}

// doctorInfo is the part of `corral doctor -o json` qualify reads.
type doctorInfo struct {
	Providers []doctorProvider `json:"providers"`
}

type doctorProvider struct {
	Provider  string            `json:"provider"`
	Available bool              `json:"available"`
	Reason    string            `json:"reason"`
	Facts     map[string]string `json:"facts"`
	Layers    []struct {
		Layer string `json:"layer"`
		State string `json:"state"`
	} `json:"layers"`
}

func (d doctorInfo) provider(name string) (doctorProvider, bool) {
	for _, p := range d.Providers {
		if p.Provider == name {
			return p, true
		}
	}
	return doctorProvider{}, false
}

func (p doctorProvider) layerAvailable(layer string) bool {
	for _, l := range p.Layers {
		if l.Layer == layer {
			return l.State == "available" || l.State == "active"
		}
	}
	return false
}

func (rs *runState) binDoctor(ctx context.Context) doctorInfo {
	var d doctorInfo
	// doctor exits 121 when no provider can enforce the default policy;
	// its JSON is still on stdout.
	out, _ := rs.runQuiet(ctx, "doctor", "-o", "json")
	_ = json.Unmarshal(out, &d)
	return d
}

func (rs *runState) runQuiet(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rs.bin, args...)
	cmd.Env = append([]string{"PATH=" + hostPath, "HOME=" + os.Getenv("HOME"), "LANG=C"}, providerEnv()...)
	cmd.Dir = rs.tmp
	rs.asUser(cmd)
	return cmd.Output()
}

// asUser makes cmd run as Options.User, when set.
func (rs *runState) asUser(cmd *exec.Cmd) {
	u := rs.opts.User
	if u == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: append([]uint32{}, u.Groups...)}
}

func parseYAMLMap(text string) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a YAML mapping")
	}
	return m, nil
}

func marshalYAML(v any) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	_ = enc.Close()
	return b.String()
}

// ---- listeners ----

// Listener is a loopback listener that counts what reaches it: TCP and
// unix stream connections, UDP and unixgram datagrams. It keeps the first
// 512 bytes of each. The runner closes it after the case.
type Listener struct {
	network string
	addr    string
	ln      net.Listener
	pc      net.PacketConn
	mu      sync.Mutex
	count   int
	data    []string
	once    sync.Once
}

// Listen starts a listener: network is tcp, tcp4, tcp6, udp, udp4, udp6,
// unix or unixgram. addr "" picks 127.0.0.1:0 ([::1]:0 for tcp6/udp6) or,
// for unix, a socket file in the case dir; "@name" is an abstract unix
// socket. A tcp or udp address must be a loopback one: no case sends
// traffic off the host.
func (e *Env) Listen(network, addr string) (*Listener, error) {
	l := &Listener{network: network}
	var err error
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
		if addr == "" {
			addr = "127.0.0.1:0"
			if strings.HasSuffix(network, "6") {
				addr = "[::1]:0"
			}
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("Listen %s %s: not a loopback address", network, addr)
		}
	case "unix", "unixgram":
		if addr == "" {
			addr = filepath.Join(e.Dir, "sock-"+randHex(4))
		}
	default:
		return nil, fmt.Errorf("Listen: unsupported network %q", network)
	}
	if strings.HasPrefix(network, "udp") || network == "unixgram" {
		l.pc, err = net.ListenPacket(network, addr)
		if err != nil {
			return nil, err
		}
		l.addr = l.pc.LocalAddr().String()
		go l.readPackets()
	} else {
		l.ln, err = net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		l.addr = l.ln.Addr().String()
		go l.accept()
	}
	if strings.HasPrefix(network, "unix") {
		if !strings.HasPrefix(addr, "@") {
			_ = os.Chmod(addr, 0o777) // reachable for any sandbox user, if the sandbox lets it
		}
		l.addr = addr
	}
	e.st.mu.Lock()
	e.st.listeners = append(e.st.listeners, l)
	e.st.mu.Unlock()
	return l, nil
}

func (l *Listener) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.count++
		i := len(l.data)
		l.data = append(l.data, "")
		l.mu.Unlock()
		go func() {
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 512)
			n, _ := io.ReadAtLeast(c, buf, len(buf))
			l.mu.Lock()
			l.data[i] = string(buf[:n])
			l.mu.Unlock()
		}()
	}
}

func (l *Listener) readPackets() {
	buf := make([]byte, 65536)
	for {
		n, _, err := l.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.count++
		l.data = append(l.data, string(buf[:min(n, 512)]))
		l.mu.Unlock()
	}
}

// Addr is the listener's address: host:port, or the unix socket path
// ("@name" for an abstract one).
func (l *Listener) Addr() string { return l.addr }

// Port is the TCP/UDP port (0 for unix sockets).
func (l *Listener) Port() int {
	_, p, err := net.SplitHostPort(l.addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Count is how many connections or datagrams arrived. It waits 100 ms
// first, so that a connection the kernel completed is accepted.
func (l *Listener) Count() int {
	time.Sleep(100 * time.Millisecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// Received is the first 512 bytes of each connection or datagram.
func (l *Listener) Received() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.data)
}

// Close stops the listener (the runner also closes it after the case).
func (l *Listener) Close() {
	l.once.Do(func() {
		if l.ln != nil {
			_ = l.ln.Close()
		}
		if l.pc != nil {
			_ = l.pc.Close()
		}
	})
}

// ---- progress ----

// progress reports the run: a one-line bar on a terminal, plain lines
// otherwise.
type progress struct {
	w      io.Writer
	tty    bool
	multi  bool // more than one provider: name it on each line
	total  int
	n      int
	curLen int
}

func newProgress(w io.Writer, multi bool) *progress {
	p := &progress{w: w, multi: multi}
	if f, ok := w.(interface{ Fd() uintptr }); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
	}
	return p
}

func (p *progress) clear() {
	if p.tty && p.curLen > 0 {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.curLen = 0
	}
}

func (p *progress) start(provider string, c Case) {
	if p.w == nil {
		return
	}
	p.n++
	if !p.tty {
		return
	}
	const width = 20
	fill := 0
	if p.total > 0 {
		fill = p.n * width / p.total
	}
	name := c.ID + " " + c.Title
	if p.multi {
		name = provider + " " + name
	}
	line := fmt.Sprintf("[%s%s] %d/%d %s", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.n, p.total, name)
	p.clear()
	fmt.Fprint(p.w, line)
	p.curLen = len(line)
}

func (p *progress) done(r Result) {
	if p.w == nil {
		return
	}
	line := fmt.Sprintf("%s %s %.1fs", r.ID, r.Status, r.Duration.Seconds())
	if p.multi {
		line = r.Provider + " " + line
	}
	if r.Status != Pass && r.Reason != "" {
		line += ": " + bound(strings.ReplaceAll(r.Reason, "\n", " "), 200)
	}
	if p.tty {
		if r.Status == Pass {
			return // the bar moves on
		}
		p.clear()
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) line(s string) {
	if p.w == nil {
		return
	}
	p.clear()
	fmt.Fprintln(p.w, s)
}

func (p *progress) finish() {
	if p.w != nil {
		p.clear()
	}
}

// providerEnv passes the operator's provider configuration (CORRAL_MXC_*,
// and WXC_* for MXC's stand-in executor) from qualify's environment to the
// corral it runs; everything else is left out.
func providerEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CORRAL_MXC_") || strings.HasPrefix(kv, "WXC_") {
			out = append(out, kv)
		}
	}
	return out
}
