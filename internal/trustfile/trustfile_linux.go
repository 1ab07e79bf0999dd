// Package trustfile writes the files a sandbox is given to trust (its CA
// bundle and Java trust store) and its credentials' placeholder files
// (provider.CredentialFiles) on the host, for the providers to bind
// read-only inside. The files live in a state directory of corral's
// that no grant reaches; they are created only if absent and rewritten
// only in place, never through a symlink or another link, so nothing
// the workload could have planted is followed.
package trustfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Mode is a trust file's: read-only for everyone (the workload reads it
// through a bind, and a daemon such as Docker's binds it).
const Mode = 0o444

// Create makes path (absent: O_EXCL, O_NOFOLLOW) holding data, Mode; on
// failure nothing is left.
func Create(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, Mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// Rewrite replaces the contents of the file at path in place (the same
// inode, which the sandbox's binds show), following no symlink in any
// component: it must be a regular file of this uid with one link, as
// Create made it. Its mode is lifted to 0600 for the write (a 0444 file
// cannot be opened for writing) and is Mode again after. A reader inside may
// see a mix of old and new while it is written. An absent file is an
// error wrapping unix.ENOENT; empty data is refused (a trust file is
// never empty: it would leave the sandbox trusting nothing).
func Rewrite(path string, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%s: refusing to empty a trust file", path)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
		return fmt.Errorf("%s is not the file corral wrote (mode %o, owner %d, %d links)", path, st.Mode, st.Uid, st.Nlink)
	}
	self := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Chmod(self, 0o600); err != nil {
		return err
	}
	defer unix.Chmod(self, Mode)
	w, err := os.OpenFile(self, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = w.WriteAt(data, 0)
	if err == nil {
		err = w.Truncate(int64(len(data)))
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}
