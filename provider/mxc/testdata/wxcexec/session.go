package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"time"

	"github.com/corral-sandbox/corral/internal/rmtree"
)

// Session states.
const (
	stProvisioned = "provisioned"
	stStarted     = "started"
	stStopped     = "stopped"
)

type metadata struct {
	AgentUserName          string `json:"agentUserName"`
	AgentUserSid           string `json:"agentUserSid"`
	EphemeralWorkspacePath string `json:"ephemeralWorkspacePath"`
}

// session is one state file, STATE/sessions/<hex>.json. Sessions outlive
// the process, as MXC's do; there is no list call.
type session struct {
	SandboxID string    `json:"sandboxId"`
	State     string    `json:"state"`
	Metadata  metadata  `json:"metadata"`
	Created   time.Time `json:"created"`
}

// stateErr is a state-aware failure: the envelope's code and message.
type stateErr struct{ code, msg string }

func (e *stateErr) Error() string { return e.code + ": " + e.msg }

func fail(code, format string, args ...any) *stateErr {
	return &stateErr{code, fmt.Sprintf(format, args...)}
}

var idRE = regexp.MustCompile(`^iso:([0-9a-f]{1,64})$`)

func stateDir() string {
	if d := os.Getenv("WXC_STATE_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "wxcexec-state")
}

// store is the state directory, locked for the duration of one state
// transition (never while a workload runs).
type store struct {
	dir    string
	unlock func()
}

func openStore() (*store, error) {
	dir := stateDir()
	for _, d := range []string{dir, filepath.Join(dir, "sessions"), filepath.Join(dir, "workspaces"), filepath.Join(dir, "profiles")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, err
	}
	return &store{dir: dir, unlock: unlock}, nil
}

func (s *store) path(hexID string) string {
	return filepath.Join(s.dir, "sessions", hexID+".json")
}

// profile is the agent user's profile directory of session hexID,
// STATE/profiles/<hex>: made at provision, kept between execs, removed at
// deprovision. Not in provision's metadata (MXC documents no such field);
// the workload learns it from USERPROFILE/HOME (profileEnv).
func (s *store) profile(hexID string) string {
	return filepath.Join(s.dir, "profiles", hexID)
}

// profileDirs are the directories made inside a new profile: on Windows
// AppData\Local and AppData\Roaming (LOCALAPPDATA, APPDATA).
func profileDirs(profile string) []string {
	dirs := []string{profile}
	if runtime.GOOS == "windows" {
		dirs = append(dirs, filepath.Join(profile, "AppData", "Local"), filepath.Join(profile, "AppData", "Roaming"))
	}
	return dirs
}

// profileEnv is the agent user's logon environment the stand-in gives
// every exec's workload, as NAME=VALUE entries that override the request's
// process.env: USERPROFILE and HOME (the profile), USERNAME (the agent
// user), and on Windows LOCALAPPDATA and APPDATA.
func profileEnv(profile, user string) []string {
	env := []string{"USERPROFILE=" + profile, "HOME=" + profile, "USERNAME=" + user}
	if runtime.GOOS == "windows" {
		env = append(env, "LOCALAPPDATA="+filepath.Join(profile, "AppData", "Local"), "APPDATA="+filepath.Join(profile, "AppData", "Roaming"))
	}
	return env
}

// load returns the session of id: malformed_id or stale_id when it has none.
func (s *store) load(id string) (*session, string, error) {
	m := idRE.FindStringSubmatch(id)
	if m == nil {
		return nil, "", fail("malformed_id", "sandboxId %q is not an IsolationSession id (iso:<lowercase hex>)", id)
	}
	b, err := os.ReadFile(s.path(m[1]))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, m[1], fail("stale_id", "no IsolationSession %s: never provisioned here, or already deprovisioned", id)
	}
	if err != nil {
		return nil, m[1], err
	}
	ses := &session{}
	if err := json.Unmarshal(b, ses); err != nil {
		return nil, m[1], fmt.Errorf("session state %s: %v", s.path(m[1]), err)
	}
	return ses, m[1], nil
}

// save writes the session atomically (temp file and rename).
func (s *store) save(hexID string, ses *session) error {
	b, err := json.MarshalIndent(ses, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path(hexID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path(hexID))
}

// provision mints a new session: NOT idempotent, every call a new id,
// agent user and workspace.
func (s *store) provision() (*session, error) {
	for range 10 {
		var rb [8]byte
		if _, err := rand.Read(rb[:]); err != nil {
			return nil, err
		}
		h := hex.EncodeToString(rb[:])
		f, err := os.OpenFile(s.path(h), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		f.Close()
		ws := filepath.Join(s.dir, "workspaces", h)
		undo := func() {
			rmtree.RemoveAll(ws)
			rmtree.RemoveAll(s.profile(h))
			os.Remove(s.path(h))
		}
		if err := os.Mkdir(ws, 0o700); err != nil {
			os.Remove(s.path(h))
			return nil, err
		}
		// Mkdir, not MkdirAll, for the profile itself: a name that exists
		// already (left by anything) is never adopted.
		if err := os.Mkdir(s.profile(h), 0o700); err != nil {
			undo()
			return nil, err
		}
		for _, d := range profileDirs(s.profile(h))[1:] {
			if err := os.MkdirAll(d, 0o700); err != nil {
				undo()
				return nil, err
			}
		}
		ses := &session{
			SandboxID: "iso:" + h,
			State:     stProvisioned,
			Created:   time.Now().UTC(),
			Metadata: metadata{
				AgentUserName:          "corral-agent-" + h,
				AgentUserSid:           "S-1-5-21-mock-" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(rb[:4])), 10),
				EphemeralWorkspacePath: ws,
			},
		}
		if err := s.save(h, ses); err != nil {
			undo()
			return nil, err
		}
		return ses, nil
	}
	return nil, errors.New("could not mint a fresh sandbox id")
}

// deprovision removes everything of the session from STATE: workspace,
// profile, state file. It ends no process: what a workload left running
// (detached ones included) keeps running; the caller must stop it first.
func (s *store) deprovision(hexID string, ses *session) error {
	for _, d := range []string{ses.Metadata.EphemeralWorkspacePath, s.profile(hexID)} {
		if err := rmtree.RemoveAll(d); err != nil {
			return err
		}
	}
	return os.Remove(s.path(hexID))
}
