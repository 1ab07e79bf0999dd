package mxc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/provider"
)

// State is where an isolation_session sandbox is in its lifecycle, as
// Corral last knew it.
type State string

const (
	// StateProvisioning is written, durably, before provision is
	// attempted. A record left in it (its provisioner gone) is an orphan:
	// an agent user and session may exist that no sandboxId names.
	StateProvisioning   State = "provisioning"
	StateProvisioned    State = "provisioned"
	StateStarted        State = "started"
	StateStopped        State = "stopped"
	StateDeprovisioning State = "deprovisioning"
	StateDeprovisioned  State = "deprovisioned"
	// StateOrphaned marks a provisioning record found after its
	// provisioner was gone (Recover).
	StateOrphaned State = "orphaned"
	// StateFailed: provision answered with an error envelope, so nothing
	// was created.
	StateFailed State = "failed"
	// StateStale: wxc-exec answered stale_id; the session the record
	// names no longer exists.
	StateStale State = "stale"
)

// Record is the durable state of one isolation_session sandbox, or of a
// process_container sandbox a control plane keeps, the file
// <stateDir>/<local_id>.json. MXC keeps no state and has no list call, so
// this record is the only way back to a session. It never holds a secret:
// no environment, no proxy credential.
type Record struct {
	LocalID    string          `json:"local_id"`
	Backend    Backend         `json:"backend"`
	PhaseState State           `json:"phase_state"`
	SandboxID  string          `json:"sandbox_id,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"` // provision's metadata{agentUserName, agentUserSid, ephemeralWorkspacePath}
	PolicyHash string          `json:"policy_hash,omitempty"`
	// Owner is the control plane the sandbox belongs to
	// (ProvisionOptions.Owner; Manager.Managed lists by it).
	Owner     string    `json:"owner,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	LastError string    `json:"last_error,omitempty"`
	// WxcPID and WxcStart name, across pid reuse, the wxc-exec of a
	// process_container sandbox a control plane keeps (container.go):
	// its pid and start time (Linux: /proc/PID/stat field 22; Windows:
	// the creation time). Zero until it was started.
	WxcPID   int    `json:"wxc_pid,omitempty"`
	WxcStart uint64 `json:"wxc_start,omitempty"`
}

// localIDPattern is what newLocalID makes, or a caller's
// ProvisionOptions.ID (provider.NewID's shape); anything else is refused
// before it becomes a path.
var localIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(mxc-[0-9a-f]{16}|corral-[0-9a-f]{12})$`) })

func newLocalID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "mxc-" + hex.EncodeToString(b[:])
}

// store is the state directory.
type store struct{ dir string }

func (s store) path(id string) string { return filepath.Join(s.dir, id+".json") }
func (s store) lockPath(id string) string {
	return filepath.Join(s.dir, id+".lock")
}

func (s store) ensure() error {
	if s.dir == "" {
		return errors.New("no state directory configured for isolation_session records")
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return makePrivate(s.dir)
}

// write stores rec durably: a temporary file in the same directory is
// written and fsynced, then renamed over the record, then the directory is
// fsynced (where the OS allows it), so a crash leaves the old record or the
// new one, never a torn one.
func (s store) write(rec *Record) error {
	if err := s.ensure(); err != nil {
		return err
	}
	now := time.Now().UTC()
	if rec.Created.IsZero() {
		rec.Created = now
	}
	rec.Updated = now
	return atomicfile.WriteJSON(s.path(rec.LocalID), rec, 0o600)
}

func (s store) read(id string) (*Record, error) {
	if !localIDPattern().MatchString(id) {
		return nil, provider.Errorf(provider.CodeNotFound, "%q is not an mxc sandbox id", id)
	}
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, provider.Errorf(provider.CodeNotFound, "no mxc record for sandbox %s in %s", id, s.dir)
	}
	if err != nil {
		return nil, &provider.Error{Code: provider.CodeInternal, Msg: "reading record " + id, Err: err}
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil || rec.LocalID != id {
		return nil, provider.Wrap(provider.CodeInternal, "record "+s.path(id)+" is corrupt", err)
	}
	return &rec, nil
}

// remove deletes id's record (the caller holds its lifecycle lock);
// nothing there is not an error.
func (s store) remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// list reads every record in the directory.
func (s store) list() ([]*Record, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !localIDPattern().MatchString(id) {
			continue
		}
		rec, err := s.read(id)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// The lifecycle lock serialises provision, start, exec, stop and
// deprovision of one sandbox, within this process (a channel per sandbox)
// and across processes (a lock file <local_id>.lock created exclusively,
// holding the owner's pid). A lock file whose owner process is gone is
// taken over, so a killed corral does not wedge its sandbox. This is plain
// Go on every OS (no flock, which Windows lacks); the one race it leaves is
// two processes taking over the same dead owner's lock at once.
var procLocks sync.Map // lock path → chan struct{} (capacity 1)

type lifecycleLock struct {
	path string
	ch   chan struct{}
}

func (s store) lock(ctx context.Context, id string) (*lifecycleLock, error) {
	if err := s.ensure(); err != nil {
		return nil, err
	}
	p := s.lockPath(id)
	v, _ := procLocks.LoadOrStore(p, make(chan struct{}, 1))
	ch := v.(chan struct{})
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		return nil, provider.Wrap(provider.CodeStale, "sandbox "+id+" is busy with another lifecycle operation", ctx.Err())
	}
	// The lock file never exists without its owner's pid: the pid is
	// written to a temporary file that is then hard-linked into place
	// (link fails if the lock exists), so no one can read an empty lock
	// and take it over from a live owner.
	// The temporary file is made anew (O_EXCL: never through a link
	// planted at its name, nor into a file left there).
	tmp := fmt.Sprintf("%s.%d.tmp", p, os.Getpid())
	_ = os.Remove(tmp)
	if err := writeNew(tmp, []byte(strconv.Itoa(os.Getpid())+"\n")); err != nil {
		<-ch
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	defer os.Remove(tmp)
	for {
		err := os.Link(tmp, p)
		if err == nil {
			return &lifecycleLock{path: p, ch: ch}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			<-ch
			return nil, err
		}
		if pid, alive := lockOwner(p); !alive || pid == os.Getpid() {
			// Dead owner, or this process (whose in-process lock we
			// hold, so the file is left over): take it over.
			os.Remove(p)
			continue
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			<-ch
			pid, _ := lockOwner(p)
			return nil, provider.Wrap(provider.CodeStale, fmt.Sprintf("sandbox %s is locked by process %d", id, pid), ctx.Err())
		}
	}
}

func (l *lifecycleLock) unlock() {
	os.Remove(l.path)
	<-l.ch
}

// heldByOther reports whether another live process holds id's lock.
func (s store) heldByOther(id string) bool {
	pid, alive := lockOwner(s.lockPath(id))
	return alive && pid != os.Getpid()
}

// lockOwner reads a lock file's pid and whether that process still runs.
// A missing or unreadable file counts as not held.
func lockOwner(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false // torn write of a crashed owner
	}
	return pid, processAlive(pid)
}

// writeNew writes b to a file made at path (0600), failing if anything,
// a link included, is there.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
