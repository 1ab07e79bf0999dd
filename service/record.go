//go:build linux

// Package service runs a long-lived agent gateway inside a persistent
// session: an identity and a state directory of its own, a sandbox built
// from a policy (the linux provider's layers and governed egress), and a
// supervisor outside the sandbox that restarts the workload and records
// what it does in a status file the workload cannot write.
//
// A session lives in its directory (Dir):
//
//	DIR/service.json   the durable record (Record), written before acting
//	DIR/policy.yaml    the policy, as given at provision
//	DIR/status.json    the supervisor's status (Status); only it writes it
//	DIR/lock           flock(2) held by every lifecycle operation
//	DIR/log/           workload.log, supervisor.log, audit.jsonl (OCSF)
//	DIR/home/          the agent's home and state: the only part the
//	                   workload sees, read-write, owned by the agent user
//
// DIR is BASE/NAME, where BASE is /var/lib/corral/services for root and
// $XDG_STATE_HOME/corral/services (default ~/.local/state/...) otherwise,
// or $CORRAL_SERVICE_DIR.
package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
)

// DirEnv relocates the base directory of every session.
const DirEnv = "CORRAL_SERVICE_DIR"

// RecordVersion is the version of the service.json shape.
const RecordVersion = 1

// Mode is the kind of identity a session has.
type Mode string

const (
	// ModeSystem (root): a dedicated system user, the agent user, owns the
	// session's home and runs the workload.
	ModeSystem Mode = "system"
	// ModeUser (unprivileged): the caller's own uid, mapped into a user
	// namespace. A weaker, same-uid boundary: the layers still apply, but
	// host files the caller owns and the policy exposes are the agent's.
	ModeUser Mode = "user"
)

// Phase is where a session's provisioning stands.
type Phase string

const (
	PhaseProvisioning   Phase = "provisioning"   // record written; user and dirs may be half made
	PhaseReady          Phase = "ready"          // everything made; can start
	PhaseDeprovisioning Phase = "deprovisioning" // being removed
)

// Record is a session's durable record (DIR/service.json).
type Record struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Mode    Mode   `json:"mode"`
	Phase   Phase  `json:"phase"`
	// User is the agent user (ModeSystem) and UserCreated whether corral
	// created it (only then may deprovision or reconcile remove it).
	User        string `json:"user,omitempty"`
	UserCreated bool   `json:"user_created,omitempty"`
	UID         int    `json:"uid"`
	GID         int    `json:"gid"`
	Dir         string `json:"dir"`
	Home        string `json:"home"`
	// Workdir, when set, is the session's working directory (granted
	// read-write when the policy's include_workdir says so); otherwise the
	// workload starts in its home.
	Workdir string `json:"workdir,omitempty"`
	// Owner is set on a one-shot session (Run): the corral process whose
	// session it is; once that process is gone the session is removed.
	Owner      *Proc     `json:"owner,omitempty"`
	PolicyHash string    `json:"policy_hash"`
	Created    time.Time `json:"created"`
	// Start is what the last `service start` asked for; autostart and
	// restart run it again.
	Start *StartSpec `json:"start,omitempty"`
	// Desired is "running" after a start and "stopped" after a stop.
	Desired string `json:"desired,omitempty"`
	// LastStart is when a workload was last started (set by the launcher
	// before the supervisor runs), Exported when the home was last
	// exported: deprovision wants an export after the last start.
	LastStart time.Time `json:"last_start,omitzero"`
	Exported  time.Time `json:"exported,omitzero"`
	// Placeholders are the placeholders of the policy's credentials, by
	// name, drawn at the first start and kept (they are not secrets), so
	// that every run of the workload, and what it wrote in its home,
	// sees the same ones. No credential value is ever in the record.
	Placeholders map[string]string `json:"placeholders,omitempty"`
}

// StartSpec is how to run the session's workload.
type StartSpec struct {
	Command []string `json:"command"`
	// Restart is "always", "on-failure" or "never".
	Restart string `json:"restart"`
	// ReadyPort is a TCP port inside the session that must accept a
	// connection; ReadyHTTP a URL (from the host, normally a published
	// port) that must answer 2xx. Either or both may be empty.
	ReadyPort int    `json:"ready_port,omitempty"`
	ReadyHTTP string `json:"ready_http,omitempty"`
	// Publish maps host loopback addresses to ports inside.
	Publish []Publish `json:"publish,omitempty"`
	// StopGrace is how long a stop waits after SIGTERM before SIGKILL.
	StopGrace Duration `json:"stop_grace"`
	// ReadyTimeout bounds the launcher's wait for the start and readiness
	// (0: DefaultReadyTimeout); Settle is how long the workload must then
	// stay the same process (0: none).
	ReadyTimeout Duration `json:"ready_timeout,omitempty"`
	Settle       Duration `json:"settle,omitempty"`
	// Web, for a policy with a consent section, is a loopback
	// "IP:PORT" where the supervisor serves the consent web page
	// (docs/consent.md), behind the token in Paths.WebToken.
	Web string `json:"web,omitempty"`
}

// DefaultReadyTimeout is the launcher's wait when none is recorded.
const DefaultReadyTimeout = 120 * time.Second

// Timeout is the launcher's wait for s.
func (s *StartSpec) Timeout() time.Duration {
	if s.ReadyTimeout > 0 {
		return time.Duration(s.ReadyTimeout)
	}
	return DefaultReadyTimeout
}

// Publish is one published port: Host ("127.0.0.1:18789", loopback only)
// forwards to Port on the session's own loopback.
type Publish struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// Base is the directory holding every session of this caller.
func Base() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("%s=%q: want an absolute path", DirEnv, d)
		}
		return canonical(d), nil
	}
	if os.Getuid() == 0 {
		return canonical("/var/lib/corral/services"), nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return canonical(filepath.Join(d, "corral", "services")), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the service state (set %s): %w", DirEnv, err)
	}
	return canonical(filepath.Join(home, ".local", "state", "corral", "services")), nil
}

// canonical resolves the symlinks of the longest existing prefix of p, so
// that a session's paths compare with the policy's canonical grants.
func canonical(p string) string {
	p = filepath.Clean(p)
	var rest []string
	for d := p; ; d = filepath.Dir(d) {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(append([]string{real}, rest...)...)
		}
		if d == "/" || d == "." {
			return p
		}
		rest = append([]string{filepath.Base(d)}, rest...)
	}
}

// RunBase is the directory of one-shot sessions (Run): runtime state,
// gone at reboot: /run/corral/services for root, else
// $XDG_RUNTIME_DIR/corral/services or /tmp/corral-UID/services; or
// $CORRAL_SERVICE_DIR like Base.
func RunBase() string {
	if d := os.Getenv(DirEnv); filepath.IsAbs(d) {
		return canonical(d)
	}
	if os.Getuid() == 0 {
		return canonical("/run/corral/services")
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return canonical(filepath.Join(d, "corral", "services"))
	}
	return canonical(filepath.Join(os.TempDir(), fmt.Sprintf("corral-%d", os.Getuid()), "services"))
}

// Paths are the files of one session.
type Paths struct{ Dir string }

func (p Paths) Record() string   { return filepath.Join(p.Dir, "service.json") }
func (p Paths) Policy() string   { return filepath.Join(p.Dir, "policy.yaml") }
func (p Paths) Status() string   { return filepath.Join(p.Dir, "status.json") }
func (p Paths) Lock() string     { return filepath.Join(p.Dir, "lock") }
func (p Paths) Logs() string     { return filepath.Join(p.Dir, "log") }
func (p Paths) Workload() string { return filepath.Join(p.Dir, "log", "workload.log") }
func (p Paths) SupLog() string   { return filepath.Join(p.Dir, "log", "supervisor.log") }
func (p Paths) Audit() string    { return filepath.Join(p.Dir, "log", "audit.jsonl") }
func (p Paths) Home() string     { return filepath.Join(p.Dir, "home") }
func (p Paths) PIDFile() string  { return filepath.Join(p.Dir, "supervisor.pid") }

// Approvals is the supervisor's approvers' consent API socket (a policy
// with a consent section; `corral approvals --service NAME`).
func (p Paths) Approvals() string { return filepath.Join(p.Dir, "approvals.sock") }

// WebToken is the consent web page's token (0600), made anew by each
// supervisor that serves the page (StartSpec.Web).
func (p Paths) WebToken() string { return filepath.Join(p.Dir, "web.token") }

// PathsOf returns the paths of session name under base.
func PathsOf(base, name string) Paths { return Paths{Dir: filepath.Join(base, name)} }

// ErrNotFound is returned for a session without a record.
var ErrNotFound = errors.New("no such service")

// LoadRecord reads a session's record.
func LoadRecord(p Paths) (*Record, error) {
	b, err := os.ReadFile(p.Record())
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (corral service list shows the provisioned ones)", ErrNotFound, filepath.Base(p.Dir))
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Record(), err)
	}
	if r.Version > RecordVersion {
		return nil, fmt.Errorf("%s: record version %d is newer than this corral's %d", p.Record(), r.Version, RecordVersion)
	}
	// Everything corral removes or runs comes from the record: it must
	// describe the directory it was found in.
	if r.Dir != p.Dir || r.Name != baseName(p) || r.Home != p.Home() {
		return nil, fmt.Errorf("%s: the record names %s (home %s), not its own directory: not corral's, or moved (remove it by hand)", p.Record(), r.Dir, r.Home)
	}
	return &r, nil
}

// Save writes the record durably: a temp file, fsync, rename, fsync of
// the directory, so a crash leaves the old record or the new one.
func (r *Record) Save() error {
	r.Version = RecordVersion
	return atomicfile.WriteJSON(Paths{r.Dir}.Record(), r, 0o600)
}

// Lock takes the session's lifecycle lock (flock on DIR/lock), waiting up
// to wait; release with the returned func.
func Lock(p Paths, wait time.Duration) (func(), error) {
	f, err := os.OpenFile(p.Lock(), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			// A removal deletes the lock file: holding the lock of a file
			// no longer at the path locks nothing.
			cur, serr := os.Stat(p.Lock())
			held, _ := f.Stat()
			if serr != nil || !os.SameFile(cur, held) {
				f.Close()
				return nil, fmt.Errorf("service %s was removed meanwhile", filepath.Base(p.Dir))
			}
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("service %s is busy: another corral service command holds %s", filepath.Base(p.Dir), p.Lock())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// List returns the names of every session under base with a record dir.
func List(base string) ([]string, error) {
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && nameRE().MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func baseName(p Paths) string { return filepath.Base(p.Dir) }

// Validate checks a start spec wherever one comes from (the command
// line, an imported export, the record): a command, a known restart
// policy, ports in range, and only loopback addresses on the host side —
// published ports and the readiness URL — so that nothing of the session
// is exposed beyond this host and the host-side probe reaches nothing
// else.
func (s *StartSpec) Validate() error {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return errors.New("start: no command")
	}
	switch s.Restart {
	case "always", "on-failure", "never":
	default:
		return fmt.Errorf("start: restart %q: use always, on-failure or never", s.Restart)
	}
	if s.ReadyPort < 0 || s.ReadyPort > 65535 {
		return fmt.Errorf("start: ready port %d: want 1-65535", s.ReadyPort)
	}
	if s.StopGrace < 0 || s.ReadyTimeout < 0 || s.Settle < 0 {
		return fmt.Errorf("start: stop grace %s, ready timeout %s, settle %s: none may be negative", time.Duration(s.StopGrace), time.Duration(s.ReadyTimeout), time.Duration(s.Settle))
	}
	if s.ReadyHTTP != "" {
		u, err := url.Parse(s.ReadyHTTP)
		if err == nil && u.Port() != "" {
			if port, perr := strconv.Atoi(u.Port()); perr != nil || port < 1 || port > 65535 {
				err = errors.New("bad port")
			}
		}
		if err != nil || u.Scheme != "http" || !loopbackHost(u.Hostname()) {
			return fmt.Errorf("start: ready URL %q: want http://LOOPBACK-ADDRESS:PORT/... (a published port), nothing beyond this host", s.ReadyHTTP)
		}
	}
	seen := map[string]bool{}
	for _, p := range s.Publish {
		if seen[p.Host] {
			return fmt.Errorf("start: %s is published twice", p.Host)
		}
		seen[p.Host] = true
		host, port, err := net.SplitHostPort(p.Host)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 || !loopbackHost(host) {
			return fmt.Errorf("start: publish %q: want a loopback address and port, e.g. 127.0.0.1:18789", p.Host)
		}
		if p.Port < 1 || p.Port > 65535 {
			return fmt.Errorf("start: publish %s: inner port %d: want 1-65535", p.Host, p.Port)
		}
	}
	return nil
}

// loopbackHost reports whether host is a loopback IP address literal.
func loopbackHost(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
