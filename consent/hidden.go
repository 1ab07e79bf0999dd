package consent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/policy"
)

// hiddenID is one path the ceiling hides (consent.folders.never, a
// filesystem.deny entry) and its directory, as they were when the broker
// started.
type hiddenID struct {
	path, field string
	dev, ino    uint64 // its directory's
}

// hiddenPaths records the identity of the directory of each path the
// ceiling hides that exists now. Masks are placed by path, and a workload
// with a read-write grant above one could rename its parent (the mask
// moves with it, and only the mask's own mount point is busy), so that a
// later grant of the new place would find nothing to mask there:
// checkHidden refuses every folder grant once such a directory is no
// longer where it was. The hidden file itself may be replaced in its
// directory (a host's passwd renames a new /etc/shadow over the old):
// the mask, placed by path, covers the new one.
func hiddenPaths(r *policy.Resolved) []hiddenID {
	c := r.Consent
	if c == nil {
		return nil
	}
	var out []hiddenID
	for _, list := range [][]policy.ConsentPath{c.FolderNever, c.Deny} {
		for _, p := range list {
			if _, err := os.Lstat(p.Path); err != nil {
				continue
			}
			if fi, err := os.Lstat(filepath.Dir(p.Path)); err == nil {
				dev, ino := fileID(fi)
				out = append(out, hiddenID{p.Path, p.Field, dev, ino})
			}
		}
	}
	return out
}

// checkHidden says which hidden path's directory moved since the broker
// started (gone from its path, or another directory there), if any.
func checkHidden(hs []hiddenID) error {
	for _, h := range hs {
		fi, err := os.Lstat(filepath.Dir(h.path))
		if err == nil {
			if dev, ino := fileID(fi); dev == h.dev && ino == h.ino {
				continue
			}
		}
		return fmt.Errorf("%s (%s) is no longer where it was when the session started (its directory was moved or replaced: a renamed parent would carry it where no mask is placed); no folder is granted in this session any more", h.path, h.field)
	}
	return nil
}
