package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Sink appends OCSF events to a JSON Lines file. It is safe for concurrent
// use, and several processes may append to the same file: every write holds
// an exclusive lock (flock(2) on Linux, LockFileEx on Windows) and writes one
// whole line with a single write on an append-only descriptor (O_APPEND;
// FILE_APPEND_DATA without FILE_WRITE_DATA), so lines never interleave.
//
// A nil *Sink is valid and discards events, so callers need no "is auditing
// on" checks.
type Sink struct {
	mu      sync.Mutex
	f       *os.File
	closed  bool
	secrets [][]byte // Redact's values, JSON-escaped
}

// Open opens (creating with mode 0600 if needed; on Windows with an
// owner-only DACL) path for appending. The mode or DACL of an existing file
// is left unchanged. See openLog for the checks made on the path (per OS).
func Open(path string) (*Sink, error) {
	f, err := openLog(path)
	if err != nil {
		return nil, err
	}
	return &Sink{f: f}, nil
}

// Redact adds values that are never written: each is replaced by
// Redacted wherever it appears in an event (as a JSON string's contents,
// which is how it would appear). A credential's value, for instance.
func (s *Sink) Redact(values ...string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // as Emit encodes
		enc.Encode(v)
		if e := bytes.TrimSuffix(bytes.TrimPrefix(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte(`"`)), []byte(`"`)); len(e) > 0 {
			s.secrets = append(s.secrets, e)
		}
	}
}

// Emit writes e as one JSON line.
func (s *Sink) Emit(e Event) error {
	if s == nil {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil { // Encode appends the '\n'
		return fmt.Errorf("audit: encode event: %w", err)
	}
	line := buf.Bytes()

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.secrets {
		line = bytes.ReplaceAll(line, v, []byte(Redacted))
	}
	if s.closed {
		return fmt.Errorf("audit: emit: %w", os.ErrClosed)
	}
	if err := lockFile(s.f, true); err != nil {
		return fmt.Errorf("audit: lock %s: %w", s.f.Name(), err)
	}
	n, werr := s.f.Write(line)
	uerr := lockFile(s.f, false)
	if werr != nil {
		return fmt.Errorf("audit: write %s: %w", s.f.Name(), werr)
	}
	if n != len(line) {
		return fmt.Errorf("audit: short write to %s (%d of %d bytes)", s.f.Name(), n, len(line))
	}
	if uerr != nil {
		return fmt.Errorf("audit: unlock %s: %w", s.f.Name(), uerr)
	}
	return nil
}

// Close fsyncs and closes the file. Closing twice (or a nil Sink) is a no-op.
func (s *Sink) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	serr := s.f.Sync()
	if errors.Is(serr, errors.ErrUnsupported) || syncUnsupported(serr) {
		serr = nil // e.g. /dev/stderr or a pipe: nothing to sync
	}
	cerr := s.f.Close()
	if serr != nil {
		return fmt.Errorf("audit: fsync %s: %w", s.f.Name(), serr)
	}
	if cerr != nil {
		return fmt.Errorf("audit: close %s: %w", s.f.Name(), cerr)
	}
	return nil
}
