package isolation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/corral-sandbox/corral/internal/rmtree"
)

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

// removeDir removes the session directory, the lock last: Windows
// deletes no file that is open without FILE_SHARE_DELETE, as the held
// lock is, so everything else goes while it is held, then it is released
// and removed. unlock is the lock's (idempotent) release.
func removeDir(p Paths, unlock func()) error {
	ents, err := os.ReadDir(p.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.Name() != filepath.Base(p.Lock()) {
			errs = append(errs, rmtree.RemoveAll(filepath.Join(p.Dir, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	unlock()
	if err := os.Remove(p.Lock()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Remove(p.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func busy(p Paths) error {
	return fmt.Errorf("service %s is busy: another corral service command holds %s", filepath.Base(p.Dir), p.Lock())
}
