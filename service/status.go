//go:build linux

package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/corral-sandbox/corral/audit"
	"os"
	"strconv"
	"time"

	"github.com/corral-sandbox/corral/internal/detached"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/session"
)

// State is what the supervisor is doing.
type State string

const (
	StateStarting   State = "starting" // building the sandbox
	StateRunning    State = "running"  // the workload runs
	StateBackoff    State = "backoff"  // the workload ended; waiting to restart it
	StateStopping   State = "stopping" // SIGTERM sent, waiting for the grace period
	StateStopped    State = "stopped"  // stopped on request
	StateFailed     State = "failed"   // ended and not restarted (policy, or start failed)
	StateDead       State = "dead"     // the supervisor is gone without saying so (read side only)
	StateNotStarted State = "not-started"
)

// Proc names a process across pid reuse (detached.Proc).
type Proc = detached.Proc

// ProcOf returns pid's identity, or a zero Proc when it is gone.
func ProcOf(pid int) Proc { return detached.ProcOf(pid) }

// Exit is how one run of the workload ended.
type Exit struct {
	Code   int       `json:"code"`
	Signal string    `json:"signal,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Probe is one readiness check's result.
type Probe struct {
	OK     bool      `json:"ok"`
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
}

// Status is what the supervisor records (DIR/status.json, written only by
// the supervisor, outside anything the workload can reach).
type Status struct {
	Name       string `json:"name"`
	State      State  `json:"state"`
	Supervisor Proc   `json:"supervisor"`
	// Init and Workload are the sandbox's init and the workload, as host
	// pids, while one runs.
	Init      Proc      `json:"init,omitzero"`
	Workload  Proc      `json:"workload,omitzero"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Started   time.Time `json:"started,omitzero"` // the current workload's start
	Restarts  int       `json:"restarts"`
	LastExit  *Exit     `json:"last_exit,omitempty"`
	Ready     *Probe    `json:"ready,omitempty"`
	// Layers are the layers in force, as the supervisor verified them
	// from outside when the sandbox started.
	Layers       []provider.LayerStatus `json:"layers,omitempty"`
	Loss         provider.LossReport    `json:"loss_report,omitempty"`
	CgroupDir    []string               `json:"cgroup,omitempty"`
	CgroupLimits map[string]string      `json:"cgroup_limits,omitempty"` // limit file (full path) -> value written
	Error        string                 `json:"error,omitempty"`
	// Audit is what the session's audit log wrote and aggregated
	// (denials beyond audit.MaxDenied a minute) or lost to rotation.
	Audit *audit.LogStats `json:"audit,omitempty"`
	// Credentials are the current run's credentials: name, source kind,
	// state, expiry (never a value).
	Credentials []session.CredentialStatus `json:"credentials,omitempty"`
	Updated     time.Time                  `json:"updated"`
}

// ReadStatus reads a session's status; a session never started has none.
func ReadStatus(p Paths) (*Status, error) {
	b, err := os.ReadFile(p.Status())
	if errors.Is(err, os.ErrNotExist) {
		return &Status{Name: baseName(p), State: StateNotStarted}, nil
	}
	if err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Status(), err)
	}
	return &s, nil
}

// Live reports whether the status's supervisor still runs; a status of
// a live state whose supervisor is gone reads as StateDead.
func (s *Status) Live() bool {
	alive := s.Supervisor.Alive()
	if !alive && s.State != StateStopped && s.State != StateFailed && s.State != StateNotStarted {
		s.State = StateDead
		s.Error = "the supervisor (pid " + strconv.Itoa(s.Supervisor.PID) + ") is gone; the workload died with it"
	}
	return alive
}
