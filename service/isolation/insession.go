package isolation

// The in-session side: `corral __service-session CMD`, run by wxc-exec
// exec as the session's agent user. It trusts nothing more than the agent
// user can: everything here is the agent's (the workload could rewrite
// any of it), which is why the launcher treats all it prints as untrusted
// input. Its state lives in the agent user's profile:
//
//	PROFILE/.corral-service/bin/corral[.exe]  copied from the staging directory at each start
//	PROFILE/.corral-service/payload/          the gateway's files, copied likewise
//	PROFILE/.corral-service/home/             the workload's HOME, USERPROFILE and working
//	                                          directory: its state, what export takes
//	PROFILE/.corral-service/log/              workload.log (rotated at 16 MiB), supervisor.log
//	PROFILE/.corral-service/spec.json         what the supervisor runs
//	PROFILE/.corral-service/status.json       the supervisor's status (SessionStatus)
//	PROFILE/.corral-service/stop              a stop request

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/procid"
	"github.com/corral-sandbox/corral/internal/rmtree"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// SessionCommand is the hidden command corral answers inside a session.
const SessionCommand = "__service-session"

// Exit codes of the in-session commands (docs/exit-codes.md).
const (
	exitOK       = 0
	exitFailed   = 1   // the command failed; stderr says why
	exitRunning  = 117 // refused: a supervisor runs (start, export, import)
	exitNotReady = 125 // start: the workload did not start
)

// State is what the in-session supervisor is doing.
type State string

const (
	StateStarting   State = "starting"
	StateRunning    State = "running"
	StateBackoff    State = "backoff" // the workload ended; waiting to restart it
	StateStopping   State = "stopping"
	StateStopped    State = "stopped"
	StateFailed     State = "failed"
	StateDead       State = "dead" // the supervisor is gone without saying so (read side only)
	StateNotStarted State = "not-started"
)

// Proc names a process across pid reuse (procid).
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Alive reports whether p still names a running process.
func (p Proc) Alive() bool {
	if p.PID <= 0 {
		return false
	}
	st, ok := procid.Start(p.PID)
	return ok && st == p.Start
}

func procOf(pid int) Proc {
	st, _ := procid.Start(pid)
	return Proc{PID: pid, Start: st}
}

// Exit is how one run of the workload ended.
type Exit struct {
	Code   int       `json:"code"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// SessionStatus is what the in-session supervisor records and `status`
// prints: the agent's own account, never evidence by itself.
type SessionStatus struct {
	State      State     `json:"state"`
	Supervisor Proc      `json:"supervisor,omitzero"`
	Workload   Proc      `json:"workload,omitzero"`
	Started    time.Time `json:"started,omitzero"`
	Restarts   int       `json:"restarts"`
	LastExit   *Exit     `json:"last_exit,omitempty"`
	Error      string    `json:"error,omitempty"`
	// Corral is the in-session corral the launcher runs for the other
	// commands; Home the workload's home.
	Corral  string    `json:"corral,omitempty"`
	Home    string    `json:"home,omitempty"`
	Updated time.Time `json:"updated,omitzero"`
}

// live reads s's supervisor from here: a status of a live state whose
// supervisor is gone reads as StateDead.
func (s *SessionStatus) live() bool {
	alive := s.Supervisor.Alive()
	switch {
	case alive:
	case s.State == StateStopped, s.State == StateFailed, s.State == StateNotStarted:
	default:
		s.State = StateDead
		s.Error = fmt.Sprintf("the supervisor (pid %d) is gone; the workload died with it", s.Supervisor.PID)
	}
	return alive
}

// sessionSpec is what the launcher hands the in-session start.
type sessionSpec struct {
	Command   []string `json:"command"`
	Restart   string   `json:"restart"`
	StopGrace Duration `json:"stop_grace"`
}

// profileDirs are the in-session paths.
type profileDirs struct{ root string }

func profile() (profileDirs, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return profileDirs{}, fmt.Errorf("the agent user's profile: %w", err)
	}
	return profileDirs{filepath.Join(home, ".corral-service")}, nil
}

func (p profileDirs) bin() string     { return filepath.Join(p.root, "bin", exeName()) }
func (p profileDirs) payload() string { return filepath.Join(p.root, "payload") }
func (p profileDirs) home() string    { return filepath.Join(p.root, "home") }
func (p profileDirs) logs() string    { return filepath.Join(p.root, "log") }
func (p profileDirs) spec() string    { return filepath.Join(p.root, "spec.json") }
func (p profileDirs) status() string  { return filepath.Join(p.root, "status.json") }
func (p profileDirs) stop() string    { return filepath.Join(p.root, "stop") }

func exeName() string {
	if runtime.GOOS == "windows" {
		return "corral.exe"
	}
	return "corral"
}

func (p profileDirs) readStatus() *SessionStatus {
	s := &SessionStatus{State: StateNotStarted}
	b, err := os.ReadFile(p.status())
	if err == nil {
		if err := json.Unmarshal(b, s); err != nil {
			s.State, s.Error = StateDead, "status.json: "+err.Error()
		}
	}
	s.live()
	return s
}

func (p profileDirs) writeStatus(s *SessionStatus) error {
	s.Updated = time.Now().UTC()
	s.Corral, s.Home = p.bin(), p.home()
	return atomicfile.WriteJSON(p.status(), s, 0o600)
}

// RunInSession runs one in-session command (args after SessionCommand)
// and returns its exit code; output goes to stdout (JSON) and stderr.
func RunInSession(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "corral "+SessionCommand+": want start|supervise|stop|status|logs|export|import")
		return exitFailed
	}
	p, err := profile()
	if err == nil {
		err = os.MkdirAll(p.logs(), 0o700)
	}
	if err != nil {
		fmt.Fprintln(stderr, "corral "+SessionCommand+":", err)
		return exitFailed
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		stage, spec, out, from string
		sums                   sumFlag
		supervisor             bool
		max                    int64
	)
	fs.StringVar(&stage, "stage", "", "staging directory of this start")
	fs.Var(&sums, "sha256", "NAME=HEX: a staged file's SHA-256")
	fs.StringVar(&spec, "spec", "", "the start spec (base64 JSON)")
	fs.StringVar(&out, "out", "", "export: the archive to write")
	fs.StringVar(&from, "from", "", "import: the archive to read")
	fs.BoolVar(&supervisor, "supervisor", false, "logs: the supervisor's log")
	fs.Int64Var(&max, "max", 1<<20, "logs: at most this many bytes, the last ones")
	if err := fs.Parse(args[1:]); err != nil {
		return exitFailed
	}
	code, err := func() (int, error) {
		switch args[0] {
		case "start":
			return p.start(stage, sums, spec, stdout)
		case "supervise":
			return p.supervise()
		case "stop":
			return p.stopSupervisor(stdout)
		case "status":
			return exitOK, json.NewEncoder(stdout).Encode(p.readStatus())
		case "logs":
			name := "workload.log"
			if supervisor {
				name = "supervisor.log"
			}
			return exitOK, tailFile(filepath.Join(p.logs(), name), max, stdout)
		case "export":
			return p.export(out, stdout)
		case "import":
			return p.importHome(from, stdout)
		}
		return exitFailed, fmt.Errorf("unknown command %q", args[0])
	}()
	if err != nil {
		fmt.Fprintf(stderr, "corral %s %s: %v\n", SessionCommand, args[0], err)
		if code == exitOK {
			code = exitFailed
		}
	}
	return code
}

// sumFlag collects NAME=HEX pairs.
type sumFlag map[string]string

func (s *sumFlag) String() string { return "" }
func (s *sumFlag) Set(v string) error {
	name, sum, ok := strings.Cut(v, "=")
	if !ok || len(sum) != 64 {
		return fmt.Errorf("want NAME=SHA256HEX, got %q", v)
	}
	if *s == nil {
		*s = map[string]string{}
	}
	(*s)[name] = sum
	return nil
}

// The staged names: corral under the name it runs by on this OS.
var stagedCorral = exeName()

const stagedPayload = "payload.tar"

// start materialises what the launcher staged — corral and the payload,
// each checked against the SHA-256 the launcher computed (given in argv,
// which the agent cannot change) — into the profile, starts the
// supervisor detached from this exec, waits for its first status and
// prints it.
func (p profileDirs) start(stage string, sums sumFlag, specB64 string, stdout io.Writer) (int, error) {
	if cur := p.readStatus(); cur.Supervisor.Alive() {
		return exitRunning, fmt.Errorf("a supervisor runs already (pid %d, %s)", cur.Supervisor.PID, cur.State)
	}
	raw, err := base64.StdEncoding.DecodeString(specB64)
	var spec sessionSpec
	if err == nil {
		err = json.Unmarshal(raw, &spec)
	}
	if err != nil || len(spec.Command) == 0 {
		return exitFailed, fmt.Errorf("--spec: not a start spec (%v)", err)
	}
	if sums[stagedCorral] == "" {
		return exitFailed, errors.New("--sha256 corral=HEX is required")
	}
	root, err := os.OpenRoot(stage)
	if err != nil {
		return exitFailed, err
	}
	defer root.Close()
	if err := os.MkdirAll(filepath.Dir(p.bin()), 0o700); err != nil {
		return exitFailed, err
	}
	if err := copyChecked(root, stagedCorral, p.bin(), sums[stagedCorral]); err != nil {
		return exitFailed, err
	}
	if want := sums[stagedPayload]; want != "" {
		if err := unpackChecked(root, stagedPayload, p.payload(), want); err != nil {
			return exitFailed, err
		}
	}
	dirs := []string{p.home()}
	if runtime.GOOS == "windows" { // workloadEnv's APPDATA and LOCALAPPDATA
		dirs = append(dirs, filepath.Join(p.home(), "AppData", "Roaming"), filepath.Join(p.home(), "AppData", "Local"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return exitFailed, err
		}
	}
	if err := atomicfile.WriteJSON(p.spec(), spec, 0o600); err != nil {
		return exitFailed, err
	}
	_ = os.Remove(p.stop())
	_ = os.Remove(p.status())
	log, err := os.OpenFile(filepath.Join(p.logs(), "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return exitFailed, err
	}
	defer log.Close()
	cmd := exec.Command(p.bin(), SessionCommand, "supervise")
	cmd.Dir = p.home()
	// Nothing of this exec's stdio: wxc-exec's output ends when this
	// process exits, not when the supervisor does.
	cmd.Stdout, cmd.Stderr = log, log
	pid, err := startDetached(cmd)
	if err != nil {
		return exitFailed, fmt.Errorf("starting the supervisor detached: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := p.readStatus()
		if s.Supervisor.PID == pid && s.State != StateStarting {
			_ = json.NewEncoder(stdout).Encode(s)
			if s.State == StateRunning {
				return exitOK, nil
			}
			why := s.Error
			if why == "" && s.LastExit != nil {
				why = fmt.Sprintf("it exited at once (%s), and restart %s does not start it again", s.LastExit.Reason, spec.Restart)
			}
			return exitNotReady, fmt.Errorf("the workload did not start: %s", why)
		}
		if time.Now().After(deadline) {
			_ = json.NewEncoder(stdout).Encode(s)
			return exitNotReady, fmt.Errorf("the supervisor (pid %d) wrote no status in 15 s (its log: %s)", pid, log.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// copyChecked copies name (a regular file in root, no link followed out
// of it) to dst, replacing it only when its SHA-256 is want.
func copyChecked(root *os.Root, name, dst, want string) error {
	in, err := openRegular(root, name)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".new"
	_ = os.Remove(tmp)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && hex.EncodeToString(h.Sum(nil)) != want {
		err = fmt.Errorf("staged %s does not have the SHA-256 the launcher staged: changed in the staging directory since", name)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// unpackChecked extracts the staged archive name into dst (replacing it)
// by safetar's rules, when the archive's SHA-256 is want.
func unpackChecked(root *os.Root, name, dst, want string) error {
	in, err := openRegular(root, name)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".new"
	if err := rmtree.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	h := sha256.New()
	tee := io.TeeReader(in, h)
	_, err = safetar.Unpack(tee, tmp, safetar.Limits{})
	if err == nil {
		_, err = io.Copy(io.Discard, tee)
	}
	if err == nil && hex.EncodeToString(h.Sum(nil)) != want {
		err = fmt.Errorf("staged %s does not have the SHA-256 the launcher staged: changed in the staging directory since", name)
	}
	if err == nil {
		if err = rmtree.RemoveAll(dst); err == nil {
			err = os.Rename(tmp, dst)
		}
	}
	if err != nil {
		rmtree.RemoveAll(tmp)
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// openRegular opens name in root and checks it is a regular file (not a
// directory, device or pipe; a link out of root is refused by os.Root).
func openRegular(root *os.Root, name string) (*os.File, error) {
	if fi, err := root.Lstat(name); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %s, not a regular file", name, fi.Mode().Type())
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return f, nil
}

// Log rotation: workload.log moves to workload.log.1 past this size.
const maxWorkloadLog = 16 << 20

// supervise is the detached supervisor: it runs the workload tied to
// itself (it dies with the supervisor), restarts it by the spec's policy
// (1 s doubling to 60 s, back to 1 s after 5 minutes of running), ends it
// on a stop request, and records everything in status.json.
func (p profileDirs) supervise() (int, error) {
	var spec sessionSpec
	b, err := os.ReadFile(p.spec())
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	st := &SessionStatus{State: StateStarting, Supervisor: procOf(os.Getpid())}
	if err != nil || len(spec.Command) == 0 {
		st.State, st.Error = StateFailed, fmt.Sprintf("spec.json: %v", err)
		_ = p.writeStatus(st)
		return exitFailed, errors.New(st.Error)
	}
	log := &rotating{path: filepath.Join(p.logs(), "workload.log"), max: maxWorkloadLog}
	defer log.Close()
	argv := make([]string, len(spec.Command))
	for i, a := range spec.Command {
		argv[i] = strings.ReplaceAll(a, "{payload}", p.payload())
	}
	env := workloadEnv(os.Environ(), p.home(), p.payload())
	backoff := time.Second
	for {
		if p.stopRequested() {
			st.State, st.Workload = StateStopped, Proc{}
			return exitOK, p.writeStatus(st)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = p.home(), env
		cmd.Stdout, cmd.Stderr = log, log
		w, err := startTied(cmd)
		if err != nil {
			st.State, st.Error, st.Workload = StateFailed, "cannot start the workload: "+err.Error(), Proc{}
			st.LastExit = &Exit{Code: 127, Reason: err.Error(), At: time.Now().UTC()}
			_ = p.writeStatus(st)
			return exitFailed, errors.New(st.Error)
		}
		st.State, st.Error, st.Workload, st.Started = StateRunning, "", procOf(cmd.Process.Pid), time.Now().UTC()
		_ = p.writeStatus(st)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stopped := false
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-time.After(100 * time.Millisecond):
				if !stopped && p.stopRequested() {
					stopped = true
					st.State = StateStopping
					_ = p.writeStatus(st)
					w.terminate(time.Duration(spec.StopGrace), done)
				}
			}
		}
		w.close()
		code := cmd.ProcessState.ExitCode()
		ran := time.Since(st.Started)
		st.LastExit, st.Workload = &Exit{Code: code, Reason: cmd.ProcessState.String(), At: time.Now().UTC()}, Proc{}
		if stopped || p.stopRequested() {
			st.State = StateStopped
			return exitOK, p.writeStatus(st)
		}
		if spec.Restart == "never" || spec.Restart == "on-failure" && code == 0 {
			st.State = StateStopped
			if code != 0 {
				st.State, st.Error = StateFailed, fmt.Sprintf("the workload exited %d and restart is %s", code, spec.Restart)
			}
			return exitOK, p.writeStatus(st)
		}
		if ran > 5*time.Minute {
			backoff = time.Second
		}
		st.State = StateBackoff
		_ = p.writeStatus(st)
		for t := time.Now(); time.Since(t) < backoff && !p.stopRequested(); {
			time.Sleep(100 * time.Millisecond)
		}
		backoff = min(backoff*2, time.Minute)
		st.Restarts++
	}
}

func (p profileDirs) stopRequested() bool {
	_, err := os.Lstat(p.stop())
	return err == nil
}

// workloadEnv is env with the workload's home (HOME, USERPROFILE and, on
// Windows, APPDATA and LOCALAPPDATA under it, as a profile has them) and
// CORRAL_PAYLOAD set: all the state a Windows program keeps per user is
// then in the home, which export takes.
func workloadEnv(env []string, home, payload string) []string {
	set := []string{"HOME=" + home, "USERPROFILE=" + home, "CORRAL_PAYLOAD=" + payload}
	if runtime.GOOS == "windows" {
		set = append(set, "APPDATA="+filepath.Join(home, "AppData", "Roaming"), "LOCALAPPDATA="+filepath.Join(home, "AppData", "Local"))
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HOME", "USERPROFILE", "CORRAL_PAYLOAD", "APPDATA", "LOCALAPPDATA":
			continue
		}
		out = append(out, kv)
	}
	return append(out, set...)
}

// stopSupervisor asks the supervisor to stop and waits for it: the
// supervisor ends the workload (its grace period, then a kill) and exits.
// A supervisor that has not exited after its grace and 10 s more is
// killed, and the workload, tied to it, with it.
func (p profileDirs) stopSupervisor(stdout io.Writer) (int, error) {
	s := p.readStatus()
	if !s.Supervisor.Alive() {
		return exitOK, json.NewEncoder(stdout).Encode(s)
	}
	if err := os.WriteFile(p.stop(), []byte("stop\n"), 0o600); err != nil {
		return exitFailed, err
	}
	var spec sessionSpec
	if b, err := os.ReadFile(p.spec()); err == nil {
		_ = json.Unmarshal(b, &spec)
	}
	deadline := time.Now().Add(time.Duration(spec.StopGrace) + 10*time.Second)
	for s.Supervisor.Alive() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s.Supervisor.Alive() {
		if _, err := procid.KillStarted(s.Supervisor.PID, s.Supervisor.Start); err != nil {
			return exitFailed, fmt.Errorf("the supervisor (pid %d) did not stop and could not be killed: %w", s.Supervisor.PID, err)
		}
	}
	return exitOK, json.NewEncoder(stdout).Encode(p.readStatus())
}

// Export and import move the home (the workload's state) through an
// archive in the staging directory, by safetar's rules on both sides.

func (p profileDirs) export(out string, stdout io.Writer) (int, error) {
	if s := p.readStatus(); s.Supervisor.Alive() {
		return exitRunning, errors.New("the service runs: stop it first, so the export is consistent")
	}
	if out == "" {
		return exitFailed, errors.New("--out is required")
	}
	if err := os.MkdirAll(p.home(), 0o700); err != nil {
		return exitFailed, err
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return exitFailed, err
	}
	st, err := safetar.Pack(f, p.home(), safetar.Limits{}, nil)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return exitFailed, err
	}
	return exitOK, json.NewEncoder(stdout).Encode(st)
}

func (p profileDirs) importHome(from string, stdout io.Writer) (int, error) {
	if s := p.readStatus(); s.Supervisor.Alive() {
		return exitRunning, errors.New("the service runs: an import goes into a stopped, fresh session")
	}
	f, err := os.Open(from)
	if err != nil {
		return exitFailed, err
	}
	defer f.Close()
	if ents, err := os.ReadDir(p.home()); err == nil && len(ents) > 0 {
		return exitFailed, fmt.Errorf("the home %s is not empty: an import goes into a fresh session", p.home())
	}
	tmp := p.home() + ".import"
	if err := rmtree.RemoveAll(tmp); err != nil {
		return exitFailed, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return exitFailed, err
	}
	st, err := safetar.Unpack(f, tmp, safetar.Limits{})
	if err == nil {
		if err = rmtree.RemoveAll(p.home()); err == nil {
			err = os.Rename(tmp, p.home())
		}
	}
	if err != nil {
		rmtree.RemoveAll(tmp)
		return exitFailed, err
	}
	return exitOK, json.NewEncoder(stdout).Encode(st)
}

// tailFile writes the last max bytes of path (nothing when missing).
func tailFile(path string, max int64, w io.Writer) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return err
		}
	}
	_, err = io.Copy(w, io.LimitReader(f, max))
	return err
}

// rotating appends to path, moving it to path.1 past max bytes.
type rotating struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	n    int64
}

func (r *rotating) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil && r.n+int64(len(b)) > r.max {
		r.f.Close()
		r.f = nil
		_ = os.Rename(r.path, r.path+".1")
	}
	if r.f == nil {
		f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return 0, err
		}
		fi, _ := f.Stat()
		r.f, r.n = f, fi.Size()
	}
	n, err := r.f.Write(b)
	r.n += int64(n)
	return n, err
}

func (r *rotating) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}

// parseStatus reads an in-session command's JSON answer: untrusted (the
// agent's), so bounded and strict.
func parseStatus(out []byte) (*SessionStatus, error) {
	var s SessionStatus
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("the session's status is not JSON: %v", err)
	}
	return &s, nil
}
