//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/trust"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// FaultEnv, for crash tests, names a point at which a service command
// kills itself with SIGKILL: provision-after-record, provision-after-user,
// provision-after-dirs, start-after-record, start-after-supervisor,
// deprovision-after-record.
const FaultEnv = "CORRAL_SERVICE_FAULT"

func fault(point string) {
	if os.Getenv(FaultEnv) == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Second)
	}
}

// userComment marks the agent users corral creates (their GECOS field), so
// that reconcile can tell them from users it must never touch.
func userComment(name string) string { return "corral service " + name }

// AgentUser is the system user of session name.
func AgentUser(name string) string { return "corral-" + name }

// ProvisionOptions are the inputs of Provision.
type ProvisionOptions struct {
	Name       string
	PolicyFile string // the policy's YAML/JSON file
	// PolicyName names the policy in errors (default PolicyFile): the
	// session's copy is gone once a rejected provision is undone.
	PolicyName string
	// Base is where the session goes (default Base()).
	Base string
	// Workdir and Owner are the record's (one-shot sessions).
	Workdir string
	Owner   *Proc
	// HomeFrom, when set, fills the new home from an export (Import).
	HomeFrom func(home string, uid, gid int) error
}

// Provision creates session name: the record first (phase provisioning),
// then the agent user (root), the directories and the policy copy, then
// checks that the policy maps without errors, and marks the record ready.
// Any failure undoes what was made. Provision is not retried blindly: a
// record left by a crash is reported as such, and `reconcile` undoes it.
func Provision(ctx context.Context, o ProvisionOptions) (*Record, error) {
	if err := ValidName(o.Name); err != nil {
		return nil, err
	}
	polBytes, err := os.ReadFile(o.PolicyFile)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	if _, err := policy.Parse(polBytes, o.PolicyFile); err != nil { // file:line errors before anything exists
		return nil, err
	}
	base := o.Base
	if base == "" {
		if base, err = Base(); err != nil {
			return nil, err
		}
	}
	if err := ensureBase(base); err != nil {
		return nil, err
	}
	p := PathsOf(base, o.Name)
	if old, err := LoadRecord(p); err == nil {
		if old.Phase != PhaseReady {
			return nil, provider.Errorf(provider.CodeStale, "service %s has a record in phase %s from an interrupted operation: run corral service reconcile", o.Name, old.Phase)
		}
		return nil, &provider.Error{Code: provider.CodeStale, Msg: fmt.Sprintf("service %s is already provisioned (%s)", o.Name, p.Dir)}
	}
	mode := os.FileMode(0o700)
	if os.Getuid() == 0 {
		mode = 0o711 // the agent user traverses to its home, and no further
	}
	if err := os.Mkdir(p.Dir, mode); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, provider.Errorf(provider.CodeStale, "%s exists without a service record: run corral service reconcile, or move it away", p.Dir)
		}
		return nil, &provider.Error{Code: provider.CodeProvisionFailed, Err: err}
	}
	unlock, err := Lock(p, 0)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec := &Record{Name: o.Name, Phase: PhaseProvisioning, Dir: p.Dir, Home: p.Home(), Created: time.Now().UTC(),
		UID: os.Getuid(), GID: os.Getgid(), Mode: ModeUser, Workdir: o.Workdir, Owner: o.Owner}
	if os.Getuid() == 0 {
		rec.Mode, rec.User = ModeSystem, AgentUser(o.Name)
	}
	if err := rec.Save(); err != nil {
		_ = os.RemoveAll(p.Dir)
		return nil, err
	}
	fault("provision-after-record")
	undo := func(cause error) (*Record, error) {
		var pe *provider.Error
		if !errors.As(cause, &pe) && !isPolicyError(cause) {
			cause = &provider.Error{Code: provider.CodeProvisionFailed, Err: cause}
		}
		if err := removeSession(rec); err != nil {
			return nil, fmt.Errorf("%w; undoing it also failed: %v (run corral service reconcile)", cause, err)
		}
		return nil, cause
	}
	if rec.Mode == ModeSystem {
		uid, gid, err := createUser(rec.User, rec.Home, userComment(o.Name))
		if err != nil {
			return undo(err)
		}
		rec.UID, rec.GID, rec.UserCreated = uid, gid, true
		if err := rec.Save(); err != nil {
			return undo(err)
		}
	}
	fault("provision-after-user")
	if err := makeDirs(rec, polBytes); err != nil {
		return undo(err)
	}
	if o.HomeFrom != nil {
		if err := o.HomeFrom(rec.Home, rec.UID, rec.GID); err != nil {
			return undo(err)
		}
	}
	fault("provision-after-dirs")
	plan, pol, err := Plan(ctx, rec, nil)
	if err != nil { // name the caller's policy, not the session's copy about to go
		return undo(&provider.Error{Code: codeOf(err), Msg: strings.ReplaceAll(err.Error(), p.Policy(), shownPolicy(o))})
	}
	if plan.Loss.HasErrors() {
		err := provider.RejectedIn(pol, plan.Loss)
		err.Msg = strings.ReplaceAll(err.Msg, p.Policy(), shownPolicy(o))
		return undo(err)
	}
	rec.PolicyHash = plan.Policy.Hash
	rec.Phase = PhaseReady
	if err := rec.Save(); err != nil {
		return undo(err)
	}
	return rec, nil
}

func shownPolicy(o ProvisionOptions) string {
	if o.PolicyName != "" {
		return o.PolicyName
	}
	return o.PolicyFile
}

// ensureBase makes the base directory: 0711 for root (agent users
// traverse it to their homes; no one lists the sessions), 0700 otherwise.
// No other user may control any directory on the way to it (trust.Dirs:
// real directories, the caller's or root's, writable by no one else but
// root's sticky ones such as /tmp), so that nothing can be swapped under
// corral between a check and a use; the existing part of the path is
// checked before anything is made. The base itself must be the caller's
// and writable by no one else, sticky or not; for root each directory must
// also let others through (agent users reach their homes).
func ensureBase(base string) error {
	mode := os.FileMode(0o700)
	uid := uint32(os.Getuid())
	if uid == 0 {
		mode = 0o711
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return err
	}
	check := func(d string, st *syscall.Stat_t) error {
		switch {
		case d == abs && st.Uid != uid:
			return fmt.Errorf("service directory %s is owned by uid %d, not yours (%d): remove it", base, st.Uid, uid)
		case d == abs && st.Mode&0o022 != 0:
			return fmt.Errorf("service directory %s is writable by others (mode %04o): chmod go-w it, or remove it", base, st.Mode&0o7777)
		case uid == 0 && st.Mode&0o001 == 0:
			return fmt.Errorf("service directory %s: %s (mode %04o) does not let agent users through to their homes: chmod o+x it, or put the sessions elsewhere (%s)", base, d, st.Mode&0o7777, DirEnv)
		}
		return nil
	}
	err = trust.MkdirAll(abs, mode, uid, check)
	var u *trust.Untrusted
	switch {
	case errors.As(err, &u) && u.NotDir:
		return fmt.Errorf("service directory %s: %v: use a real path (%s)", base, u, DirEnv)
	case errors.As(err, &u):
		return fmt.Errorf("service directory %s: %v: put the sessions elsewhere (%s)", base, u, DirEnv)
	}
	return err
}

// makeDirs creates log/ (the caller's, 0700), home/ (the agent's, 0700)
// and the policy copy (0600).
func makeDirs(rec *Record, polBytes []byte) error {
	p := Paths{rec.Dir}
	if err := os.Mkdir(p.Logs(), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(p.Policy(), polBytes, 0o600); err != nil {
		return err
	}
	if err := os.Mkdir(p.Home(), 0o700); err != nil {
		return err
	}
	return os.Lchown(p.Home(), rec.UID, rec.GID)
}

// createUser adds a system user with its own group, no login shell and
// home at home (not created: makeDirs does), with useradd(8). An existing
// user of that name is never taken over.
func createUser(name, home, comment string) (int, int, error) {
	if _, err := user.Lookup(name); err == nil {
		return 0, 0, provider.Errorf(provider.CodeStale, "user %s already exists and corral did not make it for this service: remove it (userdel %s) or pick another name", name, name)
	}
	shell := "/usr/sbin/nologin"
	if _, err := os.Stat(shell); err != nil {
		shell = "/bin/false"
	}
	out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", home,
		"--shell", shell, "--comment", comment, name).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("useradd %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("user %s: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// ownedUser reports whether name exists, carries corral's mark for
// session svc and has its home at home: corral made it for that session
// (the same name may serve a session under another base directory).
func ownedUser(name, svc, home string) bool {
	u, err := user.Lookup(name)
	return err == nil && u.Name == userComment(svc) && u.HomeDir == home
}

// deleteUser removes an agent user corral made, and its group.
func deleteUser(name string) error {
	if _, err := user.Lookup(name); err != nil {
		return nil // gone already
	}
	out, err := exec.Command("userdel", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("userdel %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeSession removes what a session's record says was made (the agent
// user only when UserCreated: never a user corral did not make): its
// processes must be gone already. The record goes last, so a crash part
// way leaves a record that says what is left.
func removeSession(rec *Record) error {
	p := Paths{rec.Dir}
	if rec.Mode == ModeSystem && rec.UserCreated {
		if err := deleteUser(rec.User); err != nil {
			return err
		}
	}
	for _, d := range []string{p.Home(), p.Logs()} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(p.Dir, ".*.tmp")) // left by a crash in atomicfile.Write
	for _, f := range append(tmps, p.Policy(), p.Status(), p.PIDFile(), p.Record(), p.Lock()) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(p.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", p.Dir, err)
	}
	return nil
}

// homeHasState reports whether the home holds anything.
func homeHasState(home string) bool {
	ents, err := os.ReadDir(home)
	return err == nil && len(ents) > 0
}

// recreateUser makes a ready session's missing agent user again, with
// the uid and gid its files carry.
func recreateUser(rec *Record) error {
	if _, err := user.LookupGroupId(strconv.Itoa(rec.GID)); err != nil {
		if out, err := exec.Command("groupadd", "--system", "--gid", strconv.Itoa(rec.GID), rec.User).CombinedOutput(); err != nil {
			return fmt.Errorf("groupadd: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	out, err := exec.Command("useradd", "--system", "--uid", strconv.Itoa(rec.UID), "--gid", strconv.Itoa(rec.GID), "--no-create-home",
		"--home-dir", rec.Home, "--shell", "/usr/sbin/nologin", "--comment", userComment(rec.Name), rec.User).CombinedOutput()
	if err != nil {
		return fmt.Errorf("useradd: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
