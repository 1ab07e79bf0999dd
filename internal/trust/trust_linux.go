package trust

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Untrusted is a directory on the way to a trusted path that another user
// could control, or that is not a real directory.
type Untrusted struct {
	Dir    string // the directory that failed
	UID    uint32 // its owner
	Mode   uint32 // its permission bits, sticky included (st_mode & 07777)
	NotDir bool   // not a directory: a symlink or another kind of file
}

func (u *Untrusted) Error() string {
	if u.NotDir {
		return fmt.Sprintf("%s is not a directory (a symlink?)", u.Dir)
	}
	return fmt.Sprintf("%s is controlled by another user (owner uid %d, mode %04o)", u.Dir, u.UID, u.Mode)
}

// Check is a caller's own rule for one directory of the chain, given its
// lstat(2) result; a non-nil error stops the walk and is returned as is.
type Check func(dir string, st *syscall.Stat_t) error

// Dirs checks dir (made absolute) and every directory above it up to /.
// Each must be a real directory (lstat: not a symlink), owned by uid or
// root, and writable by no one else: no group or other write bit, unless
// it is root's and sticky, as /tmp is (only the owner of an entry in a
// sticky directory may rename or remove it, see sticky(2) in chmod(2)).
// A directory that fails is an *Untrusted. check, when not nil, runs on
// each directory first.
func Dirs(dir string, uid uint32, check Check) error {
	d, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for ; ; d = filepath.Dir(d) {
		var st syscall.Stat_t
		if err := syscall.Lstat(d, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: d, Err: err}
		}
		u := &Untrusted{Dir: d, UID: st.Uid, Mode: st.Mode & 0o7777}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			u.NotDir = true
			return u
		}
		if check != nil {
			if err := check(d, &st); err != nil {
				return err
			}
		}
		sharedOK := st.Mode&syscall.S_ISVTX != 0 && st.Uid == 0
		if st.Uid != uid && st.Uid != 0 || st.Mode&0o022 != 0 && !sharedOK {
			return u
		}
		if d == "/" {
			return nil
		}
	}
}

// ParentPerm is the mode of a missing directory made on the way to one
// of Corral's (MkdirAll, peerhttp.ListenUnix): others may traverse it
// but not list it. Such a directory is shared — /run/corral holds corral
// run's approvals sockets and the linux sandboxes' state beside the
// services' homes, which agent users must traverse — so a 0700 one,
// made by whichever came first, would lock the others out.
const ParentPerm os.FileMode = 0o711

// Mkdir makes dir with perm, when missing, and its missing parents with
// ParentPerm; it checks nothing (MkdirAll does).
func Mkdir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dir), ParentPerm); err != nil {
		return err
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// MkdirAll makes dir with perm and its missing parents with ParentPerm
// after Dirs accepts the part of the path that exists, so that nothing is
// made under a directory another user controls; then it checks the whole
// path again.
func MkdirAll(dir string, perm os.FileMode, uid uint32, check Check) error {
	d, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	existing := d
	for existing != "/" {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		existing = filepath.Dir(existing)
	}
	if err := Dirs(existing, uid, check); err != nil {
		return err
	}
	if err := Mkdir(d, perm); err != nil {
		return err
	}
	return Dirs(d, uid, check)
}
