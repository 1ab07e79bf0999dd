// Package isolation is `corral service` on an MXC IsolationSession: the
// Windows shape of a contained agent gateway (docs/service.md, "On
// Windows"). A short-lived launcher outside the boundary (this package's
// Manager, run as the caller) provisions a persistent session with an
// OS-minted agent user through the session core and the mxc provider,
// stages corral and the gateway's payload into the session's staging
// directory, and execs corral's in-session supervisor (insession.go),
// which copies them into the agent user's profile, starts the gateway
// detached, records its pid and status there and restarts it. The
// launcher waits for readiness and exits. Everything read back from the
// session — its status, logs and exports — is the agent user's to write,
// so it is untrusted input: bounded, parsed strictly, shown escaped, and
// what the host can check from outside (the workload's token user) is
// checked there.
//
// A session lives in its directory DIR = BASE/NAME, the caller's:
//
//	DIR/service.json   the durable record (Record), written before acting
//	DIR/policy.yaml    the policy, as given at provision
//	DIR/lock           held by every lifecycle operation
//	DIR/mxc/           the mxc provider's record of the session (its sandboxId)
//	DIR/corral-service-NAME.xml  the autostart task, when enabled
//
// BASE is %LOCALAPPDATA%\corral\services on Windows, else
// $XDG_STATE_HOME/corral/mxc-services (default ~/.local/state/...), or
// $CORRAL_SERVICE_DIR.
package isolation

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/service"
)

// DirEnv relocates the base directory of every session.
const DirEnv = "CORRAL_SERVICE_DIR"

// RecordVersion is the version of the service.json shape.
const RecordVersion = 1

// Phase is where a session's provisioning stands.
type Phase string

const (
	PhaseProvisioning   Phase = "provisioning"   // record written; an agent user may exist
	PhaseReady          Phase = "ready"          // the session is provisioned and started
	PhaseDeprovisioning Phase = "deprovisioning" // being removed
)

// Record is a session's durable record (DIR/service.json). It never holds
// a secret.
type Record struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Dir     string `json:"dir"`
	Phase   Phase  `json:"phase"`
	// Sandbox is the mxc provider's local id and State what its Recover
	// takes; SandboxID is MXC's own (iso:...).
	Sandbox   string          `json:"sandbox,omitempty"`
	State     json.RawMessage `json:"state,omitempty"`
	SandboxID string          `json:"sandbox_id,omitempty"`
	// AgentUser and AgentSID are the agent user MXC minted at provision;
	// Staging its staging directory (ephemeralWorkspacePath), shared by
	// the caller and the agent user, deleted at deprovision.
	AgentUser  string    `json:"agent_user,omitempty"`
	AgentSID   string    `json:"agent_sid,omitempty"`
	Staging    string    `json:"staging,omitempty"`
	PolicyHash string    `json:"policy_hash"`
	Created    time.Time `json:"created"`
	// Start is what the last `service start` asked for; autostart and
	// restart run it again. Desired is "running" or "stopped".
	Start   *StartSpec `json:"start,omitempty"`
	Desired string     `json:"desired,omitempty"`
	// LastStart is when a workload was last started, Exported when the
	// home was last exported: deprovision wants an export after the last
	// start.
	LastStart time.Time `json:"last_start,omitzero"`
	Exported  time.Time `json:"exported,omitzero"`
	// SessionCorral is the in-session corral the last start copied into
	// the profile, as the session reported it: untrusted, it only ever
	// runs inside the session.
	SessionCorral string `json:"session_corral,omitempty"`
}

// StartSpec is how to run the session's workload.
type StartSpec struct {
	// Command runs in the session; "{payload}" in an argument is replaced
	// by the directory the payload was copied to inside the profile.
	Command []string `json:"command"`
	// Payload is a host directory staged into the session at each start
	// (the gateway's files); empty: none.
	Payload string `json:"payload,omitempty"`
	// Restart is "always", "on-failure" or "never".
	Restart string `json:"restart"`
	// ReadyPort is a TCP port on loopback that must accept a connection,
	// ReadyHTTP a loopback URL that must answer 2xx (the session shares
	// the host's network: both are probed from the host).
	ReadyPort    int      `json:"ready_port,omitempty"`
	ReadyHTTP    string   `json:"ready_http,omitempty"`
	StopGrace    Duration `json:"stop_grace"`
	ReadyTimeout Duration `json:"ready_timeout,omitempty"`
	Settle       Duration `json:"settle,omitempty"`
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

// Validate checks a start spec wherever it comes from (the command line,
// an import, the record): a command, a known restart policy, durations
// not negative, and a readiness URL on loopback only (the host-side
// probe must reach nothing else).
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
		return errors.New("start: stop grace, ready timeout and settle may not be negative")
	}
	if s.Payload != "" {
		if !filepath.IsAbs(s.Payload) {
			return fmt.Errorf("start: payload %q: want an absolute path", s.Payload)
		}
	}
	if s.ReadyHTTP != "" {
		u, err := url.Parse(s.ReadyHTTP)
		ok := err == nil && u.Scheme == "http"
		if ok {
			a, aerr := netip.ParseAddr(u.Hostname())
			port, perr := strconv.Atoi(u.Port())
			ok = aerr == nil && a.IsLoopback() && perr == nil && port > 0 && port < 65536
		}
		if !ok {
			return fmt.Errorf("start: ready URL %q: want http://LOOPBACK-ADDRESS:PORT/..., nothing beyond this host", s.ReadyHTTP)
		}
	}
	return nil
}

// Duration is a time.Duration that reads and writes as "30s".
type Duration = service.Duration

// Base is the directory holding every session of this caller.
func Base() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("%s=%q: want an absolute path", DirEnv, d)
		}
		return filepath.Clean(d), nil
	}
	if d := os.Getenv("LOCALAPPDATA"); runtime.GOOS == "windows" && filepath.IsAbs(d) {
		return filepath.Join(d, "corral", "services"), nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "corral", "mxc-services"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the service state (set %s): %w", DirEnv, err)
	}
	return filepath.Join(home, ".local", "state", "corral", "mxc-services"), nil
}

// Paths are the files of one session.
type Paths struct{ Dir string }

func (p Paths) Record() string   { return filepath.Join(p.Dir, "service.json") }
func (p Paths) Policy() string   { return filepath.Join(p.Dir, "policy.yaml") }
func (p Paths) Lock() string     { return filepath.Join(p.Dir, "lock") }
func (p Paths) MXCState() string { return filepath.Join(p.Dir, "mxc") }
func (p Paths) Task() string {
	return filepath.Join(p.Dir, "corral-service-"+filepath.Base(p.Dir)+".xml")
}

// PathsOf returns the paths of session name under base.
func PathsOf(base, name string) Paths { return Paths{Dir: filepath.Join(base, name)} }

// ErrNotFound is returned for a session without a record.
var ErrNotFound = errors.New("no such service")

// LoadRecord reads a session's record; it must name the directory it is
// in (everything corral removes or runs comes from it).
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
	if r.Dir != p.Dir || r.Name != filepath.Base(p.Dir) {
		return nil, fmt.Errorf("%s: the record names %s, not its own directory: not corral's, or moved (remove it by hand)", p.Record(), r.Dir)
	}
	return &r, nil
}

// Save writes the record durably (temp file, fsync, rename, fsync of the
// directory): a crash leaves the old record or the new one.
func (r *Record) Save() error {
	r.Version = RecordVersion
	return atomicfile.WriteJSON(Paths{r.Dir}.Record(), r, 0o600)
}
