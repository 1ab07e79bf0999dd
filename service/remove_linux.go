//go:build linux

package service

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux/cgroup"
)

// Deprovision removes session name: its autostart unit, agent user, home,
// logs and record. It refuses while the session runs (stop it first),
// and while the home holds state that no export has taken since a
// workload last ran, unless force. The record is marked deprovisioning
// first, so an interrupted removal is finished by reconcile.
func Deprovision(name string, force bool) error {
	p, rec, unlock, err := openLocked(name, 5*time.Second)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := ReadStatus(p)
	if err != nil {
		return err
	}
	if st.Live() {
		return &provider.Error{Code: provider.CodeStale, Msg: fmt.Sprintf("service %s is running (supervisor pid %d): corral service stop %s first", name, st.Supervisor.PID, name)}
	}
	if !force && homeHasState(rec.Home) && unexported(rec) {
		return &provider.Error{Code: provider.CodeStale, Msg: fmt.Sprintf("the home of %s holds state no export has taken since it last ran: corral service export %s -o %s.tar.zst first, or deprovision --force to lose it", name, name, name)}
	}
	rec.Phase = PhaseDeprovisioning
	if err := rec.Save(); err != nil {
		return err
	}
	fault("deprovision-after-record")
	return finishRemoval(rec)
}

// unexported reports whether a workload was started after the last export
// (or no export was ever taken).
func unexported(rec *Record) bool {
	return rec.Exported.IsZero() || !rec.LastStart.Before(rec.Exported)
}

// finishRemoval removes the autostart unit, then the session.
func finishRemoval(rec *Record) error {
	if err := DisableAutostart(rec); err != nil {
		return err
	}
	return removeSession(rec)
}

// Finding is one thing reconcile found, and what it did about it.
type Finding struct {
	Service  string `json:"service,omitempty"`
	Resource string `json:"resource"` // record, user, dir, process, cgroup
	Finding  string `json:"finding"`
	Action   string `json:"action"` // what was done, or "none: ..." with why
}

// Reconcile compares records with resources and repairs what it safely
// can: an interrupted provision is undone (provision is not retried on a
// guess), an interrupted deprovision finished, a missing agent user or
// home of a ready session made again, supervisors without a ready record
// stopped, agent users and empty session dirs without a record removed,
// cgroups of dead sandboxes swept. A session dir without a record whose
// home holds data is listed and kept: state is never deleted on a guess.
// With dryRun nothing changes.
func Reconcile(dryRun bool) ([]Finding, error) {
	base, err := Base()
	if err != nil {
		return nil, err
	}
	bases := []string{base}
	if rb := RunBase(); rb != base {
		bases = append(bases, rb)
	}
	var out []Finding
	act := func(f Finding, do func() error) { // do is nil for a finding that needs nothing done
		switch {
		case do == nil:
		case dryRun:
			f.Action = "would: " + f.Action
		default:
			if err := do(); err != nil {
				f.Action = "failed: " + f.Action + ": " + err.Error()
			}
		}
		out = append(out, f)
	}
	ready := map[string]bool{} // session dirs
	for _, base := range bases {
		names, err := List(base)
		if err != nil {
			return nil, err
		}
		out = append(out, reconcileDir(base, names, ready, dryRun, act)...)
	}
	for _, sp := range supervisors() {
		if ready[sp.dir] || !slices.Contains(bases, filepath.Dir(sp.dir)) {
			continue // a session of another base (CORRAL_SERVICE_DIR) is not ours to judge
		}
		act(Finding{filepath.Base(sp.dir), "process", fmt.Sprintf("supervisor pid %d runs for %s, which has no ready record", sp.proc.PID, sp.dir), "stop it"}, func() error {
			stopSupervisor(sp.proc, 10*time.Second)
			return nil
		})
	}
	if os.Getuid() == 0 {
		for _, u := range agentUsers() {
			// Only users whose home is a session of these bases.
			if !slices.Contains(bases, filepath.Dir(filepath.Dir(u.home))) || hasRecord(bases, u.service) {
				continue
			}
			act(Finding{u.service, "user", fmt.Sprintf("agent user %s (uid %d) has no record", u.name, u.uid), "remove it"}, func() error { return deleteUser(u.name) })
		}
	}
	if !dryRun {
		if removed, err := cgroup.Sweep(); err != nil {
			out = append(out, Finding{"", "cgroup", err.Error(), "none"})
		} else {
			for _, c := range removed {
				out = append(out, Finding{"", "cgroup", c + " belonged to a sandbox whose supervisor is gone", "removed"})
			}
		}
	}
	return out, nil
}

func hasRecord(bases []string, name string) bool {
	for _, b := range bases {
		if _, err := LoadRecord(PathsOf(b, name)); err == nil {
			return true
		}
	}
	return false
}

// reconcileDir reconciles the sessions of one base directory, adding the
// dirs of those whose supervisors may run to ready.
func reconcileDir(base string, names []string, ready map[string]bool, dryRun bool, act func(Finding, func() error)) []Finding {
	var out []Finding
	for _, name := range names {
		p := PathsOf(base, name)
		unlock, err := Lock(p, 2*time.Second)
		if err != nil {
			ready[p.Dir] = true // a lifecycle command is at work on it: hands off
			out = append(out, Finding{name, "record", err.Error(), "none: busy"})
			continue
		}
		rec, err := LoadRecord(p)
		switch {
		case errors.Is(err, ErrNotFound):
			out = append(out, orphanDir(p, name, dryRun))
		case err != nil:
			out = append(out, Finding{name, "record", err.Error(), "none: fix or remove " + p.Record()})
		default:
			st, _ := ReadStatus(p)
			live := st != nil && st.Live()
			switch {
			case rec.Owner != nil && !rec.Owner.Alive():
				act(Finding{name, "record", fmt.Sprintf("one-shot session of corral pid %d, which is gone", rec.Owner.PID), "remove it"}, func() error { return removeSession(rec) })
			case rec.Owner != nil:
				ready[p.Dir] = true // its corral service run is at work
			case rec.Phase == PhaseProvisioning && !live:
				act(Finding{name, "record", "provision was interrupted", "undo it (user, dirs, record)"}, func() error {
					// Killed between useradd and saving that it did so: the
					// user carries this session's mark.
					if rec.Mode == ModeSystem && !rec.UserCreated && ownedUser(rec.User, rec.Name, rec.Home) {
						rec.UserCreated = true
					}
					return removeSession(rec)
				})
			case rec.Phase == PhaseDeprovisioning && !live:
				act(Finding{name, "record", "deprovision was interrupted", "finish it"}, func() error { return finishRemoval(rec) })
			case rec.Phase == PhaseReady:
				ready[p.Dir] = true
				repairReady(rec, st, act)
			}
		}
		unlock()
	}
	return out
}

// repairReady checks a ready session's resources, acting through act.
func repairReady(rec *Record, st *Status, act func(Finding, func() error)) {
	if rec.Mode == ModeSystem {
		if _, err := user.Lookup(rec.User); err != nil {
			act(Finding{rec.Name, "user", "agent user " + rec.User + " is missing", fmt.Sprintf("create it again with uid %d", rec.UID)}, func() error {
				return recreateUser(rec)
			})
		}
	}
	if _, err := os.Lstat(rec.Home); errors.Is(err, os.ErrNotExist) {
		act(Finding{rec.Name, "dir", "home " + rec.Home + " is missing", "create it empty"}, func() error {
			if err := os.Mkdir(rec.Home, 0o700); err != nil {
				return err
			}
			return os.Lchown(rec.Home, rec.UID, rec.GID)
		})
	}
	if st != nil && st.State == StateDead {
		f := Finding{rec.Name, "process", st.Error, "none: it stays down until corral service start " + rec.Name}
		if rec.Desired == "running" {
			f.Action = "none: wanted running; corral service start " + rec.Name + " (autostart does at boot)"
		}
		act(f, nil)
	}
}

// orphanDir handles a session dir without a record: removed when its home
// is empty (with its agent user, if corral's), kept and listed otherwise.
func orphanDir(p Paths, name string, dryRun bool) Finding {
	f := Finding{name, "dir", p.Dir + " has no record", ""}
	if homeHasState(p.Home()) {
		f.Action = "none: its home holds data; export it with tar, then remove " + p.Dir
		return f
	}
	f.Action = "remove it"
	if dryRun {
		f.Action = "would: remove it"
		return f
	}
	rec := &Record{Name: name, Dir: p.Dir, Mode: ModeUser}
	if os.Getuid() == 0 && ownedUser(AgentUser(name), name, p.Home()) {
		rec.Mode, rec.User, rec.UserCreated = ModeSystem, AgentUser(name), true
	}
	if err := removeSession(rec); err != nil {
		f.Action = "failed: remove it: " + err.Error()
	}
	return f
}

type supervisorProc struct {
	proc Proc
	dir  string
}

// supervisors lists this uid's running session supervisors, from
// /proc/*/cmdline ("corral __service-supervise DIR").
func supervisors() []supervisorProc {
	var out []supervisorProc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) != 3 || args[1] != SupervisorArg {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) != nil || int(st.Uid) != os.Getuid() {
			continue
		}
		if p := ProcOf(pid); p.PID != 0 {
			out = append(out, supervisorProc{p, args[2]})
		}
	}
	return out
}

type agentUser struct {
	name, service, home string
	uid                 int
}

// agentUsers lists the users of /etc/passwd that carry corral's mark.
func agentUsers() []agentUser {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []agentUser
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 7 {
			continue
		}
		svc, ok := strings.CutPrefix(fs[4], userComment(""))
		if !ok || fs[0] != AgentUser(svc) {
			continue
		}
		uid, _ := strconv.Atoi(fs[2])
		out = append(out, agentUser{fs[0], svc, fs[5], uid})
	}
	return out
}
