//go:build linux

package service

import (
	"fmt"
	"os"
	"sync"

	"github.com/corral-sandbox/corral/audit"
)

// The workload decides how many egress decisions it causes, so the
// session's audit log is bounded like workload.log: at auditMax bytes it
// is renamed audit.jsonl.1 (replacing the older one), at most twice this
// on disk. A log the caller named (service run --audit) is not rotated:
// its egress events are capped per run at auditEvents, as corral run's.
const (
	auditMax    = 64 << 20
	auditEvents = 10000
)

// auditLog writes the session's OCSF events.
type auditLog struct {
	mu      sync.Mutex
	path    string
	sink    *audit.Sink
	rotate  bool
	n       int // events since the size was last checked
	egress  int // egress events written (capped when !rotate)
	dropped int
}

func openAuditLog(path string, rotate bool) (*auditLog, error) {
	s, err := audit.Open(path)
	if err != nil {
		return nil, err
	}
	return &auditLog{path: path, sink: s, rotate: rotate}, nil
}

func (l *auditLog) emit(e audit.Event, egress bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if egress {
		if !l.rotate && l.egress >= auditEvents {
			l.dropped++
			return
		}
		l.egress++
	}
	_ = l.sink.Emit(e)
	if l.n++; !l.rotate || l.n < 256 {
		return
	}
	l.n = 0
	if fi, err := os.Stat(l.path); err == nil && fi.Size() >= auditMax {
		_ = l.sink.Close()
		_ = os.Rename(l.path, l.path+".1")
		if s, err := audit.Open(l.path); err == nil {
			l.sink = s
		}
	}
}

func (l *auditLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		fmt.Fprintf(os.Stderr, "corral: egress: %d decisions beyond the first %d were not written to the audit log\n", l.dropped, auditEvents)
	}
	_ = l.sink.Close()
}
