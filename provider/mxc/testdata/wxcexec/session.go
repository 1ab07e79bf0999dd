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
	"strconv"
	"time"
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
	for _, d := range []string{dir, filepath.Join(dir, "sessions"), filepath.Join(dir, "workspaces")} {
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
		if err := os.Mkdir(ws, 0o700); err != nil {
			os.Remove(s.path(h))
			return nil, err
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
			os.Remove(ws)
			os.Remove(s.path(h))
			return nil, err
		}
		return ses, nil
	}
	return nil, errors.New("could not mint a fresh sandbox id")
}

func (s *store) deprovision(hexID string, ses *session) error {
	if err := os.RemoveAll(ses.Metadata.EphemeralWorkspacePath); err != nil {
		return err
	}
	return os.Remove(s.path(hexID))
}
