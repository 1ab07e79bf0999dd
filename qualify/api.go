//go:build linux

// Package qualify is `corral qualify`: the adversarial suite of
// shared/cases/ADVERSARIAL.md run against a provider as real sandboxes,
// each case with its own throwaway home, canaries, loopback listeners and
// policy, and a report bound to what it tested.
package qualify

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/probe"
)

// Status is a case's outcome. A skip is never a pass.
type Status string

const (
	Pass    Status = "pass"
	Fail    Status = "fail"
	Skipped Status = "skipped"
)

// Evidence is one thing a case attempted and what came back.
type Evidence struct {
	Attempt string `json:"attempt"`
	Got     string `json:"got"`
}

// Result is one case run against one provider.
type Result struct {
	ID       string        `json:"id"`
	Title    string        `json:"title"`
	Provider string        `json:"provider"`
	Status   Status        `json:"status"`
	Reason   string        `json:"reason,omitempty"` // why it failed or was skipped
	Evidence []Evidence    `json:"evidence"`
	Duration time.Duration `json:"duration_ns"`
}

// Case is one adversarial case.
type Case struct {
	ID    string // "P01"
	Title string // "read-only vs read-write grants"
	// Applies says whether the case can run for provider on this host,
	// and if not why (the case is then reported skipped with that reason).
	Applies func(e *Env) (ok bool, why string)
	Run     func(ctx context.Context, e *Env) Result
}

// Run is one sandboxed command of a case.
type Run struct {
	Policy  string   // policy YAML body; Env.SystemPolicy(...) helps build it
	Workdir string   // -C; default: a fresh dir in the case's temp dir
	Env     []string // extra environment for corral itself (the sandbox's is scrubbed by policy)
	Flags   []string // extra `corral run` flags (-t, --audit FILE, -v)
	// Probe runs `corral __probe Probe[0] Probe[1:]...` inside the sandbox
	// (the corral binary is granted read-only); Args runs an arbitrary
	// command instead. Exactly one is set.
	Probe   []string
	Args    []string
	Stdin   string
	Timeout time.Duration // default 60s
}

// Outcome is what a Run returned.
type Outcome struct {
	Code           int
	Stdout, Stderr string
	Report         *probe.Report // parsed from Stdout when Probe was set
	Elapsed        time.Duration
}
