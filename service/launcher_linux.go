//go:build linux

package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/detached"
	"github.com/corral-sandbox/corral/provider"
)

// StartOptions tune the launcher.
type StartOptions struct {
	// Exe is the corral binary the supervisor runs (normally
	// /proc/self/exe resolved).
	Exe string
}

// Open loads session name's record.
func Open(name string) (Paths, *Record, error) {
	if err := ValidName(name); err != nil {
		return Paths{}, nil, err
	}
	base, err := Base()
	if err != nil {
		return Paths{}, nil, err
	}
	p := PathsOf(base, name)
	rec, err := LoadRecord(p)
	if err != nil {
		return p, nil, &provider.Error{Code: provider.CodeNotFound, Msg: err.Error()}
	}
	return p, rec, nil
}

// openLocked opens name's record under its lifecycle lock, waiting up to
// wait: the record is read once the lock is held, so no stale copy of it
// is saved.
func openLocked(name string, wait time.Duration) (Paths, *Record, func(), error) {
	p, _, err := Open(name) // exists, before Lock creates a lock file in its directory
	if err != nil {
		return p, nil, nil, err
	}
	unlock, err := Lock(p, wait)
	if err != nil {
		return p, nil, nil, err
	}
	rec, err := LoadRecord(p)
	if err != nil {
		unlock()
		return p, nil, nil, &provider.Error{Code: provider.CodeNotFound, Msg: err.Error()}
	}
	return p, rec, unlock, nil
}

// Start is the launcher: it records what to run (spec, or the recorded
// one when spec is nil), starts the supervisor detached (its own session,
// re-parented when the launcher exits), waits for the workload to start,
// for readiness and for the settle window, and returns. Nothing of the
// launcher stays resident. A workload that fails to start or to become
// ready is stopped, and the error says why, with the log's last lines.
func Start(ctx context.Context, name string, spec *StartSpec, o StartOptions) (*Status, error) {
	p, rec, unlock, err := openLocked(name, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec.Phase != PhaseReady {
		return nil, &provider.Error{Code: provider.CodeStale, Msg: fmt.Sprintf("service %s is in phase %s: run corral service reconcile", name, rec.Phase)}
	}
	if st, err := ReadStatus(p); err == nil && st.Live() {
		return nil, &provider.Error{Code: provider.CodeStale, Msg: fmt.Sprintf("service %s is already running (supervisor pid %d): use corral service restart", name, st.Supervisor.PID)}
	}
	if spec != nil {
		rec.Start = spec
	}
	if rec.Start == nil {
		return nil, fmt.Errorf("service %s has no command yet: corral service start %s -- COMMAND [ARG...]", name, name)
	}
	if err := rec.Start.Validate(); err != nil {
		return nil, err
	}
	ho := credentialSetup(ctx, rec)
	rec.Desired, rec.LastStart = "running", time.Now().UTC()
	if err := rec.Save(); err != nil {
		return nil, err
	}
	fault("start-after-record")
	_ = os.Remove(p.Status()) // the new supervisor's status replaces the old one's
	logf, err := os.OpenFile(p.SupLog(), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	hr, hw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	sup, r, err := detached.Start(o.Exe, []string{SupervisorArg, p.Dir}, ho.strip(detached.Env(Environ[0])), logf, hr)
	logf.Close()
	hr.Close()
	if err != nil {
		hw.Close()
		return nil, &provider.Error{Code: provider.CodeStartFailed, Msg: "supervisor: " + err.Error()}
	}
	go writeHandoff(hw, ho)
	defer r.Close()
	fault("start-after-supervisor")

	// An interrupted launcher (Ctrl-C, a closed SSH session) leaves no
	// half-started service behind: it stops what it started.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	interrupted := func(sig os.Signal) (*Status, error) {
		stopSupervisor(sup, time.Duration(rec.Start.StopGrace)+5*time.Second)
		return nil, &provider.Error{Code: provider.CodeStartFailed, Msg: fmt.Sprintf("interrupted by %s while waiting for the workload: it was stopped", sig)}
	}
	type launched struct {
		m   launchMsg
		err error
	}
	lc := make(chan launched, 1)
	go func() { m, err := readLaunch(r, rec.Start.Timeout()); lc <- launched{m, err} }()
	var msg launchMsg
	select {
	case l := <-lc:
		msg, err = l.m, l.err
	case sig := <-sigs:
		return interrupted(sig)
	}
	if err != nil || !msg.Started {
		stopSupervisor(sup, 5*time.Second)
		if err == nil {
			err = &provider.Error{Code: provider.Code(msg.Code), Layer: msg.Layer, Msg: msg.Error}
		}
		return nil, withLogTail(err, p)
	}
	deadline := time.Now().Add(rec.Start.Timeout())
	var since time.Time
	for {
		st, err := ReadStatus(p)
		if err != nil {
			return nil, err
		}
		switch {
		case !st.Live() || st.State != StateRunning || st.Restarts > 0 || st.Workload.PID != msg.PID || !st.Workload.Alive():
			// Give the supervisor a moment to record how it ended.
			for i := 0; i < 20 && st.LastExit == nil && st.Live(); i++ {
				time.Sleep(50 * time.Millisecond)
				if again, err := ReadStatus(p); err == nil {
					st = again
				}
			}
			stopSupervisor(sup, time.Duration(rec.Start.StopGrace)+5*time.Second)
			why := fmt.Sprintf("the workload did not stay up (state %s", st.State)
			if st.LastExit != nil {
				why += fmt.Sprintf(", exit %d%s", st.LastExit.Code, WithSignal(st.LastExit.Signal))
			}
			return nil, withLogTail(&provider.Error{Code: provider.CodeStartFailed, Msg: why + ")"}, p)
		case (rec.Start.ReadyPort == 0 && rec.Start.ReadyHTTP == "") || (st.Ready != nil && st.Ready.OK):
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= time.Duration(rec.Start.Settle) {
				return st, nil
			}
		}
		if time.Now().After(deadline) {
			stopSupervisor(sup, time.Duration(rec.Start.StopGrace)+5*time.Second)
			why := "the workload was not ready within " + rec.Start.Timeout().String()
			if st.Ready != nil {
				why += ": " + st.Ready.Detail
			}
			return nil, withLogTail(&provider.Error{Code: provider.CodeTimeout, Msg: why + "; it was stopped"}, p)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case sig := <-sigs:
			return interrupted(sig)
		}
	}
}

// handoff is what the launcher gives the supervisor on its stdin, a pipe:
// never in its argv, its environment (/proc/PID/environ), the record,
// the status or a log.
type handoff struct {
	// Environ are the launcher's variables the policy's credentials
	// read (source env), "NAME=value".
	Environ []string `json:"environ"`
}

// maxHandoff bounds what the supervisor reads of its stdin.
const maxHandoff = 4 << 20

// credentialSetup prepares rec's credentials for a start: the
// placeholders of credentials new to the record are drawn and kept in it
// (saved with it), and the handoff holds the variables that env sources
// name, from this process's environment. A policy that does not resolve
// now gets neither: the supervisor refuses it with the reason.
func credentialSetup(ctx context.Context, rec *Record) handoff {
	h := handoff{Environ: []string{}}
	plan, _, err := Plan(ctx, rec, rec.Start)
	if err != nil {
		return h
	}
	for _, c := range plan.Policy.Credentials {
		if rec.Placeholders == nil {
			rec.Placeholders = map[string]string{}
		}
		rec.Placeholders[c.Name] = c.Placeholder // Plan kept the recorded ones
		if v, ok := os.LookupEnv(c.Source.Env); ok && c.Source.Env != "" {
			h.Environ = append(h.Environ, c.Source.Env+"="+v)
		}
	}
	return h
}

// strip removes from env the variables h carries (a CORRAL_* one that
// detached.Env would pass): their values go by the pipe alone.
func (h handoff) strip(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(h.Environ, func(c string) bool { return strings.HasPrefix(c, name+"=") })
	})
}

func writeHandoff(w *os.File, h handoff) {
	defer w.Close()
	_ = json.NewEncoder(w).Encode(h)
}

// ReadHandoff reads the launcher's handoff from the supervisor's stdin
// and returns the environment its credentials' env sources read (empty,
// never nil, when stdin is not the launcher's pipe).
func ReadHandoff(stdin *os.File) []string {
	if fi, err := stdin.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return []string{}
	}
	var h handoff
	if err := json.NewDecoder(io.LimitReader(stdin, maxHandoff)).Decode(&h); err != nil || h.Environ == nil {
		return []string{}
	}
	return h.Environ
}

func readLaunch(r *os.File, timeout time.Duration) (launchMsg, error) {
	var m launchMsg
	if err := detached.ReadReady(r, timeout, &m); err != nil {
		return launchMsg{}, &provider.Error{Code: provider.CodeStartFailed, Msg: err.Error()}
	}
	return m, nil
}

// withLogTail adds the last lines of the session's logs to err.
func withLogTail(err error, p Paths) error {
	var tail []string
	for _, f := range []string{p.SupLog(), p.Workload()} {
		if t := lastLines(f, 10); t != "" {
			tail = append(tail, f+":\n"+t)
		}
	}
	if len(tail) == 0 {
		return err
	}
	if pe, ok := err.(*provider.Error); ok {
		pe.Msg += "\n" + strings.Join(tail, "\n")
		return pe
	}
	return fmt.Errorf("%w\n%s", err, strings.Join(tail, "\n"))
}

func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	lines := strings.Split(strings.TrimRight(Printable(string(b)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// stopSupervisor stops the supervisor (detached.Stop): its sandboxes
// die with it, as their init has a parent-death signal.
func stopSupervisor(sup Proc, grace time.Duration) bool { return detached.Stop(sup, grace) }

// Stop stops session name's workload and supervisor: SIGTERM, the stop
// grace, then SIGKILL. It records the wish (desired stopped) first, for
// status and reconcile (an enabled autostart unit still starts it at
// boot). Stopping a stopped session succeeds.
func Stop(name string) (*Status, error) {
	p, rec, unlock, err := openLocked(name, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec.Desired = "stopped"
	if err := rec.Save(); err != nil {
		return nil, err
	}
	st, err := ReadStatus(p)
	if err != nil {
		return nil, err
	}
	if st.Live() {
		grace := 30 * time.Second
		if rec.Start != nil {
			grace = time.Duration(rec.Start.StopGrace)
		}
		if stopSupervisor(st.Supervisor, grace+10*time.Second) {
			fmt.Fprintf(os.Stderr, "corral service: the supervisor of %s did not stop in time and was killed\n", name)
		}
	}
	return ReadStatus(p)
}
