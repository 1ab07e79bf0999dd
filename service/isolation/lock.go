package isolation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/rmtree"
)

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
