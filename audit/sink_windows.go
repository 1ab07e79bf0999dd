//go:build windows

package audit

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winfile"
)

// openLog opens path for appending, creating it with an owner-only DACL
// (winfile.OwnerOnly, the counterpart of mode 0600). Every check is made
// on a handle, so no name is looked up twice:
//
//   - The path is walked from its volume root by handle, never through a
//     link (winfile.Open: a symlink, junction or mount point on the way is
//     refused).
//   - The file is opened the same way (FILE_OPEN_IF relative to its
//     directory's handle, FILE_APPEND_DATA without FILE_WRITE_DATA, so
//     every write appends) and must be a disk file, not a directory nor a
//     reparse point of any kind, with one link, owned by the caller
//     (winfile.CheckFile), and not an alternate data stream.
//
// Limits: those of winfile.Open (a subst or mapped drive is followed, as a
// mount is on Linux). The DACL of an existing file is neither checked nor
// changed (as the mode is not on Linux). The file is shared for delete
// (rename while open, which rotation needs), so whoever may delete in its
// directory can rename it away, as on Linux.
func openLog(path string) (*os.File, error) {
	user, err := callerSID()
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: the caller's SID: %w", path, err)
	}
	sd, err := winfile.OwnerOnly(user)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	h, err := winfile.Open(path,
		windows.FILE_APPEND_DATA|windows.FILE_READ_ATTRIBUTES|windows.READ_CONTROL|windows.SYNCHRONIZE,
		windows.FILE_OPEN_IF, windows.FILE_NON_DIRECTORY_FILE, sd)
	var ce *winfile.ComponentError
	switch {
	case errors.Is(err, winfile.ErrNoName), errors.Is(err, winfile.ErrDevice):
		return nil, fmt.Errorf("audit: %s is not a regular file; refusing to append to it", path)
	case errors.Is(err, winfile.ErrStream):
		return nil, fmt.Errorf("audit: %s names an alternate data stream; refusing to append to it", path)
	case errors.Is(err, windows.STATUS_FILE_IS_A_DIRECTORY):
		return nil, fmt.Errorf("audit: %s is not a regular file (a directory); refusing to append to it", path)
	case errors.As(err, &ce) && !ce.NotDir:
		return nil, fmt.Errorf("audit: open %s: %v; give the real path", path, ce)
	case err != nil:
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	if err := winfile.CheckFile(h, user); err != nil {
		windows.CloseHandle(h)
		return nil, fmt.Errorf("audit: %s %v; refusing to append to it", path, err)
	}
	return os.NewFile(uintptr(h), path), nil
}

// callerSID is the owner openLog gives a new file and requires of an
// existing one. A variable for tests.
var callerSID = winfile.User

// lockOffset is the one byte Emit locks (LockFileEx, exclusive, waiting):
// the last a file offset can name, far past any data. A Windows lock is
// mandatory for the bytes it covers, so locking data would make a writer
// that does not lock (a tool appending to the log) fail; a byte no write
// reaches only orders the sinks, of this process and of others, which all
// lock it.
const lockOffset = 1<<63 - 1

// lockFile takes or releases the exclusive lock on lockOffset.
func lockFile(f *os.File, lock bool) error {
	ol := windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
	h := windows.Handle(f.Fd())
	if lock {
		return windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, &ol)
	}
	return windows.UnlockFileEx(h, 0, 1, 0, &ol)
}

// syncUnsupported: FlushFileBuffers on a file system or redirector that
// cannot flush.
func syncUnsupported(err error) bool {
	return errors.Is(err, windows.ERROR_INVALID_FUNCTION) || errors.Is(err, windows.ERROR_NOT_SUPPORTED)
}
