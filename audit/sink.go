package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sink appends OCSF events to a JSON Lines file. It is safe for concurrent
// use, and several processes may append to the same file: every write holds
// an exclusive advisory flock(2) and writes one whole line with a single
// write(2) on an O_APPEND descriptor, so lines never interleave.
//
// A nil *Sink is valid and discards events, so callers need no "is auditing
// on" checks.
type Sink struct {
	mu     sync.Mutex
	f      *os.File
	closed bool
}

// Open opens (creating with mode 0600 if needed) path for appending. The mode
// of an existing file is left unchanged.
//
// The file is opened without following symlinks in any component
// (openat2 RESOLVE_NO_SYMLINKS) and must be a regular file with one link
// owned by the caller: a log kept where a sandbox can write could otherwise
// be swapped for a link to a file the (root) caller would then append to.
func Open(path string) (*Sink, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		// O_NONBLOCK: a FIFO planted at path must not hang the open (it
		// is refused below); cleared again for the regular file.
		Flags:   unix.O_APPEND | unix.O_CREAT | unix.O_WRONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
		Mode:    0o600,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if err == unix.ELOOP {
			return nil, fmt.Errorf("audit: open %s: a path component is a symlink; give the real path", path)
		}
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: stat %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("not a regular file")
	case st.Nlink != 1:
		err = fmt.Errorf("has %d hard links", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("is owned by uid %d, not by the caller (uid %d)", st.Uid, os.Geteuid())
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: %s %v; refusing to append to it", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	return &Sink{f: f}, nil
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
	if s.closed {
		return fmt.Errorf("audit: emit: %w", os.ErrClosed)
	}
	fd := int(s.f.Fd())
	if err := flock(fd, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("audit: lock %s: %w", s.f.Name(), err)
	}
	n, werr := s.f.Write(line)
	uerr := flock(fd, syscall.LOCK_UN)
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
	if errors.Is(serr, syscall.EINVAL) || errors.Is(serr, syscall.ENOTSUP) {
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

func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if err != syscall.EINTR {
			return err
		}
	}
}
