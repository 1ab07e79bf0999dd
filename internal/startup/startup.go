// Package startup records where one run's time goes, for
// `corral run --trace-startup`: each of the run's processes (the
// supervisor, the sandbox init) marks the end of each phase on one clock,
// and the supervisor prints the marks of all of them in order when the
// run ends.
//
// The clock is CLOCK_MONOTONIC (clock_gettime(2)), which processes share
// unless a time namespace separates them (Corral makes none), so the
// init's marks line up with the supervisor's. Recording is off unless
// Enable was called: a mark then costs a branch.
package startup

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mark is the end of one phase in one process.
type Mark struct {
	Proc  string `json:"proc"`  // "supervisor", "init"
	Phase string `json:"phase"` // what ended, e.g. "policy loaded"
	At    int64  `json:"at"`    // CLOCK_MONOTONIC, ns
}

var (
	mu    sync.Mutex
	on    bool
	marks []Mark
)

// Enable starts recording for this process.
func Enable() {
	mu.Lock()
	on = true
	mu.Unlock()
}

// Enabled reports whether Enable was called.
func Enabled() bool {
	mu.Lock()
	defer mu.Unlock()
	return on
}

// Add marks the end of phase in proc, now.
func Add(proc, phase string) {
	if !Enabled() {
		return
	}
	at := Now()
	mu.Lock()
	marks = append(marks, Mark{Proc: proc, Phase: phase, At: at})
	mu.Unlock()
}

// Entry is when a process's main began: taken first thing (it costs two
// clock reads), recorded with Begin once the process knows it traces.
type Entry struct {
	at  int64     // CLOCK_MONOTONIC, ns
	now time.Time // the same moment with Go's monotonic reading
}

// Enter is the Entry of now.
func Enter() Entry { return Entry{at: Now(), now: time.Now()} }

// Begin marks, for proc, the end of its start (exec, the Go runtime's
// and the packages' initialisation) and the start of its main, at e.
// The first is e less Go's monotonic reading of e, which the time
// package documents (Time.String: "m=±<value>") as counted from its own
// initialisation, early in the process's, after the runtime's start.
func Begin(proc string, e Entry) {
	if !Enabled() {
		return
	}
	mu.Lock()
	marks = append(marks,
		Mark{Proc: proc, Phase: "process started (exec)", At: e.at - int64(sinceTimeInit(e.now))},
		Mark{Proc: proc, Phase: "main (package initialisation done)", At: e.at})
	mu.Unlock()
}

// Merge adds marks another process sent (nothing unless enabled: a
// process that never asked keeps none).
func Merge(ms []Mark) {
	mu.Lock()
	if on {
		marks = append(marks, ms...)
	}
	mu.Unlock()
}

// Take returns this process's marks so far and forgets them (to send to
// the process that prints them).
func Take() []Mark {
	mu.Lock()
	defer mu.Unlock()
	ms := marks
	marks = nil
	return ms
}

// sinceTimeInit is t's monotonic reading: the time since the time
// package was initialised (0 when t has none).
func sinceTimeInit(t time.Time) time.Duration {
	s := t.String()
	i := strings.LastIndex(s, " m=")
	if i < 0 {
		return 0
	}
	f, err := strconv.ParseFloat(s[i+3:], 64)
	if err != nil {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// Write prints the marks, in time order, as milliseconds since the first
// and since the one before: "  +12.345  (+0.210)  init  mount tree".
func Write(w io.Writer) {
	mu.Lock()
	ms := append([]Mark(nil), marks...)
	mu.Unlock()
	if len(ms) == 0 {
		return
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].At < ms[j].At })
	fmt.Fprintf(w, "corral: start-up trace (ms on CLOCK_MONOTONIC since the first mark; in brackets since the mark before)\n")
	t0, prev := ms[0].At, ms[0].At
	for _, m := range ms {
		fmt.Fprintf(w, "corral: %9.3f (%+8.3f)  %-10s  %s\n", ms64(m.At-t0), ms64(m.At-prev), m.Proc, m.Phase)
		prev = m.At
	}
}

func ms64(ns int64) float64 { return float64(ns) / 1e6 }
