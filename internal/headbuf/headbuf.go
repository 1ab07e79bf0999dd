// Package headbuf is a writer that keeps the first bytes written to it
// and drops the rest: a child's stderr quoted in an error, a credential
// command's output, the head of a file scanned for secrets. It never
// fails, so a copy into it is never cut short.
package headbuf

import "sync"

// Buffer keeps the first Max bytes written to it; safe for concurrent
// use. The zero value keeps nothing.
type Buffer struct {
	mu    sync.Mutex
	max   int
	b     []byte
	total int64
}

// New is a Buffer keeping up to max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

// Write keeps what fits of p and reports all of it written.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	w.total += int64(len(p))
	return len(p), nil
}

// Bytes is what was kept (not a copy).
func (w *Buffer) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b
}

// String is what was kept.
func (w *Buffer) String() string { return string(w.Bytes()) }

// Total is how many bytes were written, kept or not.
func (w *Buffer) Total() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}
