package audit

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

// A workload decides how many egress decisions it causes, so a session's
// log writes denials one by one only up to MaxDenied per window and
// aggregates the rest. An allowed decision can carry data out: each is
// written one by one up to MaxAllowed per window (a log that is not
// rotated would otherwise grow without bound), and beyond that still with
// its destination, in an aggregate. Lifecycle events and findings are
// always written.
const (
	// MaxDenied is how many denied decisions a window writes one by one.
	MaxDenied = 10000
	// MaxAllowed is how many allowed decisions a window writes one by one.
	MaxAllowed = 100000
	// maxKinds bounds the aggregates kept for one window (destination and
	// reason); denials of further kinds are counted under one "other".
	maxKinds = 256
)

// LogOptions bound a Log.
type LogOptions struct {
	// MaxBytes > 0 rotates the file at that size: it is renamed PATH.1
	// (replacing the older one), and the new file's first event says
	// what was moved and what was lost.
	MaxBytes int64
	// Window > 0 writes the aggregates every Window and opens a new
	// window (a long-lived session); otherwise the log is one window,
	// its aggregates written at Flush and Close.
	Window time.Duration
	// MaxDenied and MaxAllowed replace the constants (tests); 0: them.
	MaxDenied, MaxAllowed int
}

// LogStats is what a Log has written and left out, for `corral run -v`
// and a session's status.
type LogStats struct {
	Events        int `json:"events"`                    // events written
	Allowed       int `json:"allowed"`                   // allowed egress decisions (all written)
	Denied        int `json:"denied"`                    // denied egress decisions
	Aggregated    int `json:"aggregated,omitempty"`      // decisions written as aggregates, not one by one
	Failed        int `json:"failed,omitempty"`          // events that could not be written (the file: see stderr)
	Rotations     int `json:"rotations,omitempty"`       // times the file was rotated
	LostInRotated int `json:"lost_in_rotated,omitempty"` // events of this log in a PATH.1 that a rotation replaced
}

// Log is a session's audit log: a Sink with the bounds described above. A
// nil *Log discards events.
type Log struct {
	mu     sync.Mutex
	path   string
	sink   *Sink
	opts   LogOptions
	stats  LogStats
	n      int // events since the size was last checked
	inCur  int // events of this log in the current file
	inPrev int // events of this log in PATH.1
	// oldPrev: PATH.1 was there when the log was opened, with events
	// of an earlier process (a restarted supervisor or gateway).
	oldPrev   bool
	denied    int // denials written one by one in this window
	allowed   int // allowed decisions written one by one in this window
	pending   map[aggKey]*aggregate
	closed    bool
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{}
	done      chan struct{}
}

type aggKey struct {
	allowed bool
	host    string
	port    int
	reason  string
}

type aggregate struct {
	run         RunInfo
	first, last time.Time
	count       int
}

// OpenLog opens path for appending (Open's checks) with opts' bounds.
func OpenLog(path string, opts LogOptions) (*Log, error) {
	s, err := Open(path)
	if err != nil {
		return nil, err
	}
	if opts.MaxDenied == 0 {
		opts.MaxDenied = MaxDenied
	}
	if opts.MaxAllowed == 0 {
		opts.MaxAllowed = MaxAllowed
	}
	l := &Log{path: path, sink: s, opts: opts, pending: map[aggKey]*aggregate{}}
	if _, err := os.Lstat(path + ".1"); err == nil {
		l.oldPrev = true
	}
	if opts.Window > 0 {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.tick()
	}
	return l, nil
}

func (l *Log) tick() {
	defer close(l.done)
	t := time.NewTicker(l.opts.Window)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.mu.Lock()
			l.flush()
			l.denied, l.allowed = 0, 0 // a new window
			l.mu.Unlock()
		case <-l.stop:
			return
		}
	}
}

// Redact adds values the log never writes (Sink.Redact), in this file
// and the ones it rotates to.
func (l *Log) Redact(values ...string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sink.Redact(values...)
}

// Emit writes e (a lifecycle event or a finding): never dropped.
func (l *Log) Emit(e Event) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(e)
}

// Egress records one egress decision: one by one while the window has
// room for its kind (MaxAllowed, MaxDenied), else in its aggregate.
func (l *Log) Egress(run RunInfo, d EgressDecision) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n, max := &l.denied, l.opts.MaxDenied
	if d.Allowed {
		l.stats.Allowed++
		n, max = &l.allowed, l.opts.MaxAllowed
	} else {
		l.stats.Denied++
	}
	if *n < max {
		*n++
		l.write(Egress(run, d))
		return
	}
	l.stats.Aggregated++
	k := aggKey{d.Allowed, d.Host, d.Port, d.Reason}
	a, ok := l.pending[k]
	if !ok && len(l.pending) >= maxKinds {
		k = aggKey{allowed: d.Allowed, reason: "other"}
		a, ok = l.pending[k]
	}
	if !ok {
		a = &aggregate{run: run, first: d.Time}
		l.pending[k] = a
	}
	a.count++
	a.last = d.Time
}

// Flush writes the aggregates of the decisions not written one by one so
// far: one HTTP Activity event per decision, destination and reason, with
// OCSF's count, start_time and end_time. The window goes on (only Window's
// tick opens a new one).
func (l *Log) Flush() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush()
}

func (l *Log) flush() {
	keys := make([]aggKey, 0, len(l.pending))
	for k := range l.pending {
		keys = append(keys, k)
	}
	key := func(k aggKey) string { return fmt.Sprint(k.allowed, "\x00", k.host, "\x00", k.port, "\x00", k.reason) }
	sort.Slice(keys, func(i, j int) bool { return key(keys[i]) < key(keys[j]) })
	for _, k := range keys {
		a := l.pending[k]
		e := Egress(a.run, EgressDecision{Time: a.last, Allowed: k.allowed, Host: k.host, Port: k.port, Reason: k.reason})
		e.Count, e.StartTime, e.EndTime = a.count, a.first.UnixMilli(), a.last.UnixMilli()
		dest := net.JoinHostPort(k.host, strconv.Itoa(k.port))
		if k.host == "" {
			dest = "destinations beyond the first " + strconv.Itoa(maxKinds)
		}
		what, max := "denied", l.opts.MaxDenied
		if k.allowed {
			what, max = "allowed", l.opts.MaxAllowed
		}
		e.Message = fmt.Sprintf("%d %s requests to %s (%s) beyond the first %d of this window, aggregated", a.count, what, dest, k.reason, max)
		l.write(e)
	}
	clear(l.pending)
}

// write appends e and rotates when the file reached MaxBytes.
func (l *Log) write(e Event) {
	if l.closed {
		l.stats.Failed++
		return
	}
	if err := l.sink.Emit(e); err != nil {
		if l.stats.Failed++; l.stats.Failed == 1 {
			fmt.Fprintf(os.Stderr, "corral: audit: %v (later failures are counted, not printed)\n", err)
		}
		return
	}
	l.stats.Events++
	l.inCur++
	if l.opts.MaxBytes <= 0 {
		return
	}
	if l.n++; l.n < 256 {
		return
	}
	l.n = 0
	fi, err := os.Stat(l.path)
	if err != nil || fi.Size() < l.opts.MaxBytes {
		return
	}
	// Renamed while open (the descriptor follows the file), then the new
	// file opened: a rename or an open that fails leaves the log writing
	// where it was.
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return
	}
	s, err := Open(l.path)
	if err != nil {
		_ = os.Rename(l.path+".1", l.path)
		return
	}
	s.mu.Lock()
	l.sink.mu.Lock()
	s.secrets = l.sink.secrets
	l.sink.mu.Unlock()
	s.mu.Unlock()
	_ = l.sink.Close()
	l.sink = s
	l.stats.Rotations++
	l.stats.LostInRotated += l.inPrev
	lost := l.inPrev
	l.inPrev, l.inCur = l.inCur, 0
	msg := fmt.Sprintf("audit log rotated at %d bytes: the previous %d events are in %s.1", l.opts.MaxBytes, l.inPrev, l.path)
	switch {
	case lost > 0:
		msg += fmt.Sprintf("; the %d events that file held before were removed", lost)
	case l.oldPrev:
		msg += "; the events an earlier process had left in that file were removed"
	}
	l.oldPrev = false
	if l.sink.Emit(Note(msg)) == nil {
		l.stats.Events++
		l.inCur++
	}
}

// Stats returns what the log wrote and left out so far.
func (l *Log) Stats() LogStats {
	if l == nil {
		return LogStats{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Close writes the pending aggregates, fsyncs and closes the file; later
// events are counted as Failed. Closing twice is a no-op.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() {
		if l.stop != nil {
			close(l.stop)
			<-l.done
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.flush()
		l.closed = true
		l.closeErr = l.sink.Close()
	})
	return l.closeErr
}
