// Package placeholder keeps protected names that do not exist yet from
// being created at the top of a read-write tree. A mount needs a name to
// mount on, and a name absent on the host cannot be covered, so for the
// run Corral creates each one empty on the host (a file or a directory),
// marks it, locks it, and the provider binds it read-only into the
// sandbox; afterwards the last run holding it removes it, so the host tree
// is left as it was.
//
// Concurrent runs over one tree share placeholders: each holds a shared
// flock(2) on every placeholder it uses, and only a run that can take the
// lock exclusively removes one (removing a name that another sandbox has
// mounted would detach that mount there, lifting its protection). The
// mark (an xattr) lets a later run adopt one that a killed corral left
// behind, and remove it in turn; a placeholder is removed only while it
// is still empty, marked and the same inode, so nothing a person put there
// meanwhile is lost.
package placeholder

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
)

// Mark is the extended attribute that marks a placeholder.
const Mark = policy.PlaceholderMark

// Set is the placeholders one sandbox holds, from Acquire to Release.
type Set struct {
	held []held
}

type held struct {
	path   string
	dir    bool
	fd     int // the placeholder, open, with a shared flock
	parent int // O_PATH fd of its parent
	ino    uint64
	dev    uint64
	ours   bool // created or adopted as a placeholder (removable), not a real file that appeared meanwhile
	made   bool // created by this Acquire
}

// Acquire creates (or adopts) every placeholder of r and locks it
// shared, and locks shared every other protected path r binds read-only
// (never to remove it: a run over the same tree may have made it, and
// must not take it away while this run has it mounted). On error nothing
// it made is left behind. Paths are canonical (policy Resolve made them)
// and are opened without following any symlink.
func Acquire(r *policy.Resolved) (*Set, error) {
	s := &Set{}
	for _, ph := range r.Placeholders {
		h, err := acquire(ph, true)
		if err != nil {
			s.Release()
			return nil, fmt.Errorf("placeholder for protected %s (%s): %w", ph.Path, ph.Field, err)
		}
		s.held = append(s.held, h)
	}
	for _, g := range r.Grants {
		if !strings.HasPrefix(g.Field, "filesystem.protected") {
			continue
		}
		if h, err := acquire(policy.Placeholder{Path: g.Path, Dir: g.Dir, Field: g.Field}, false); err == nil {
			s.held = append(s.held, h) // best effort: it exists, so the bind covers it either way
		}
	}
	return s, nil
}

// acquire takes one placeholder (create: make it when absent) or, with
// create false, only locks what is there.
func acquire(ph policy.Placeholder, create bool) (held, error) {
	parent, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(ph.Path), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == unix.ENOSYS { // before Linux 5.6 (a docker host): the last component unfollowed at least
		parent, err = unix.Open(filepath.Dir(ph.Path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return held{}, fmt.Errorf("open parent: %w", err)
	}
	name := filepath.Base(ph.Path)
	// A few tries: a run that is removing the same placeholder may unlink
	// it between our open and our lock.
	for try := 0; try < 5; try++ {
		h, retry, err := take(parent, name, ph.Dir, create)
		if err == nil {
			h.path, h.dir, h.parent = ph.Path, ph.Dir, parent
			return h, nil
		}
		if !retry {
			unix.Close(parent)
			return held{}, err
		}
	}
	unix.Close(parent)
	return held{}, errors.New("it kept being removed by another run")
}

// take creates name in parent (or opens what is there), locks it shared
// and checks it is still the name's inode.
func take(parent int, name string, dir, create bool) (h held, retry bool, err error) {
	created := false
	switch {
	case !create:
	case dir:
		if err := unix.Mkdirat(parent, name, 0o755); err == nil {
			created = true
		} else if err != unix.EEXIST {
			return h, false, fmt.Errorf("mkdir: %w", err)
		}
	default:
		fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		if err == nil {
			created = true
			unix.Close(fd)
		} else if err != unix.EEXIST {
			return h, false, fmt.Errorf("create: %w", err)
		}
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
	if dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Openat(parent, name, flags, 0)
	if err != nil {
		if err == unix.ENOENT {
			return h, true, err
		}
		// Something else is there now (a symlink, a fifo, a file where
		// a directory was meant): the provider's bind will cover what
		// exists, or fail; nothing here is ours to remove.
		return h, false, fmt.Errorf("open: %w", err)
	}
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		unix.Close(fd)
		return h, false, fmt.Errorf("flock: %w", err)
	}
	var st, now unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return h, false, err
	}
	if err := unix.Fstatat(parent, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return h, true, errors.New("replaced while being locked")
	}
	h = held{fd: fd, ino: st.Ino, dev: st.Dev}
	switch {
	case created:
		// Unmarked (a filesystem without user xattrs) it still is ours to
		// remove; another run takes it for a real protected file and
		// locks it as such, so it is never removed under that run, and
		// then stays (docs/policy.md).
		_ = unix.Fsetxattr(fd, Mark, []byte("1"), 0)
		h.ours, h.made = true, true
	case create:
		h.ours = marked(fd) && empty(fd, dir)
	}
	return h, false, nil
}

// marked reports whether fd carries the placeholder mark.
func marked(fd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, Mark, buf)
	return err == nil && n == 1 && buf[0] == '1'
}

// empty reports whether fd is an empty file or a directory with no entries.
func empty(fd int, dir bool) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	if !dir {
		return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	buf := make([]byte, 4096)
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dup)
	for {
		n, err := unix.Getdents(dup, buf)
		if err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		if len(names) > 0 { // ParseDirent skips . and ..
			return false
		}
	}
}

// Release removes every placeholder no other run still holds, if it is
// still empty, marked and the same inode, and closes everything. It is
// safe to call on a nil or already released Set.
func (s *Set) Release() {
	if s == nil {
		return
	}
	// In parallel: each is a handful of syscalls on its own fds, and a
	// run waits for the last before it exits.
	var wg sync.WaitGroup
	next := make(chan held)
	for range min(releasers, len(s.held)) {
		wg.Go(func() {
			for h := range next {
				h.release()
			}
		})
	}
	for _, h := range s.held {
		next <- h
	}
	close(next)
	wg.Wait()
	s.held = nil
}

// releasers is how many placeholders Release removes at once.
const releasers = 4

// Close lets go of every placeholder without removing any (for a sandbox
// given up while its mounts may still be in place).
func (s *Set) Close() {
	if s == nil {
		return
	}
	for _, h := range s.held {
		unix.Close(h.fd)
		unix.Close(h.parent)
	}
	s.held = nil
}

func (h held) release() {
	defer unix.Close(h.parent)
	defer unix.Close(h.fd)
	if !h.ours {
		return
	}
	// Exclusive only when no other run holds it shared.
	if err := unix.Flock(h.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return
	}
	var now unix.Stat_t
	if err := unix.Fstatat(h.parent, filepath.Base(h.path), &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Ino != h.ino || now.Dev != h.dev {
		return
	}
	// Someone put something there: theirs now. A directory is left by
	// rmdir itself when not empty (ENOTEMPTY, rmdir(2)).
	if !h.dir && !empty(h.fd, false) {
		return
	}
	flags := 0
	if h.dir {
		flags = unix.AT_REMOVEDIR
	}
	_ = unix.Unlinkat(h.parent, filepath.Base(h.path), flags)
}

// Made lists the placeholders this Acquire had to create: when a
// sandbox is recovered, one that is not there any more was removed while
// its mount was in place, which detached the mount.
func (s *Set) Made() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, h := range s.held {
		if h.made {
			out = append(out, h.path)
		}
	}
	return out
}
