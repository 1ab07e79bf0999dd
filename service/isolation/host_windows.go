package isolation

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winfile"
)

// privateDir makes dir (and its missing parents) the caller's alone: no
// link followed on the way, an owner-only protected DACL
// (winfile.MakePrivateDir).
func privateDir(dir string) error { return winfile.MakePrivateDir(dir) }

// lock takes the session's lifecycle lock: LockFileEx (exclusive, not
// waiting, retried until wait) on DIR/lock, made owner-only when missing
// and opened without following a link (winfile.Open). Windows drops the
// lock when the handle closes.
func lock(p Paths, wait time.Duration) (func(), error) {
	user, err := winfile.User()
	if err != nil {
		return nil, err
	}
	sd, err := winfile.OwnerOnly(user)
	if err != nil {
		return nil, err
	}
	h, err := winfile.Open(p.Lock(), windows.GENERIC_READ|windows.GENERIC_WRITE, windows.FILE_OPEN_IF, windows.FILE_NON_DIRECTORY_FILE, sd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(h), p.Lock())
	deadline := time.Now().Add(wait)
	for {
		var ol windows.Overlapped
		err := windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
		if err == nil {
			return lockHeld(p, f)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, busy(p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockHeld checks that the locked file is still the one at the path: a
// removal deletes it, and a lock on a file no longer there locks nothing.
func lockHeld(p Paths, f *os.File) (func(), error) {
	cur, serr := os.Stat(p.Lock())
	held, _ := f.Stat()
	if serr != nil || !os.SameFile(cur, held) {
		f.Close()
		return nil, fmt.Errorf("service %s was removed meanwhile", filepath.Base(p.Dir))
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil // idempotent: removeDir unlocks early
}
