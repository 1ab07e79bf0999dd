// Package detached is the process core that Corral's long-lived
// supervisors share (a service's, and a persistent linux sandbox's): a
// process started detached from its launcher with a readiness pipe, named
// across pid reuse by its pid and start time, and stopped with SIGTERM
// then SIGKILL. Whatever such a process supervises dies with it (the
// sandbox's init has a parent-death signal).
package detached

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/procstat"
)

// Proc names a process across pid reuse: its pid and start time in clock
// ticks after boot (/proc/PID/stat field 22, proc(5)).
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start_ticks"`
}

// Alive reports whether p still names a running process (a zombie,
// dead but not yet reaped by its parent, is not).
func (p Proc) Alive() bool {
	if p.PID <= 0 {
		return false
	}
	st, err := procstat.Read(p.PID)
	return err == nil && st.StartTicks == p.Start && st.Running()
}

// ProcOf returns pid's identity, or a zero Proc when it is gone.
func ProcOf(pid int) Proc {
	st, err := procstat.Read(pid)
	if err != nil {
		return Proc{}
	}
	return Proc{PID: pid, Start: st.StartTicks}
}

// Env is a supervisor's environment: path (a fixed "PATH=..."), and the
// caller's CORRAL_* settings (the egress resolver, fault injection for
// tests, state directories). Nothing else of the caller's reaches it.
func Env(path string) []string {
	env := []string{path}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CORRAL_") {
			env = append(env, kv)
		}
	}
	return env
}

// ReadyFD is the readiness pipe's fd in the started process.
const ReadyFD = 3

// Start starts exe with args detached: in a session of its own (so the
// launcher's terminal and process group signals never reach it), in /,
// with env, stdout and stderr appended to log, stdin from stdin (nil:
// /dev/null), and the write end of a readiness pipe as fd ReadyFD. It
// returns the process's identity and the pipe's read end (see ReadReady).
// The process is reaped in the background while the caller lives, and
// re-parented when it exits.
func Start(exe string, args, env []string, log, stdin *os.File) (Proc, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return Proc{}, nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env, cmd.Dir = env, "/"
	cmd.Stdout, cmd.Stderr = log, log
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return Proc{}, nil, err
	}
	p := ProcOf(cmd.Process.Pid)
	go func() { _, _ = cmd.Process.Wait() }()
	return p, r, nil
}

// ReadReady reads the one JSON line the process writes on its readiness
// pipe (Tell) into v, waiting at most timeout. A process that ends
// without writing it gives an error saying so.
func ReadReady(r *os.File, timeout time.Duration, v any) error {
	_ = r.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("the supervisor said nothing within %s", timeout)
	}
	if err != nil {
		return fmt.Errorf("the supervisor ended without saying it was ready: %w", err)
	}
	return json.Unmarshal(line, v)
}

// Tell writes v as the one JSON line of the readiness pipe w and closes
// it; a nil w (no launcher waits) does nothing.
func Tell(w *os.File, v any) {
	if w == nil {
		return
	}
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(b, '\n'))
	_ = w.Close()
}

// Stop sends SIGTERM to p and waits up to grace for it to end, then
// SIGKILLs it. It reports whether it had to kill.
func Stop(p Proc, grace time.Duration) bool {
	if !p.Alive() {
		return false
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.Alive() {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	for i := 0; i < 250 && p.Alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
