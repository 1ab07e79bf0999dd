package consent

import (
	"fmt"
	"os"

	"github.com/corral-sandbox/corral/policy"
)

// hiddenID is one path the ceiling hides (consent.folders.never, a
// filesystem.deny entry) as it was when the broker started.
type hiddenID struct {
	path, field string
	dev, ino    uint64
}

// hiddenPaths records the identity of each path the ceiling hides that
// exists now. Masks are placed by path, and a workload with a read-write
// grant above one could rename its parent (the mask moves with it, and
// only the mask's own mount point is busy), so that a later grant of the
// new place would find nothing to mask there: checkHidden refuses every
// folder grant once one of them is no longer where it was.
func hiddenPaths(r *policy.Resolved) []hiddenID {
	c := r.Consent
	if c == nil {
		return nil
	}
	var out []hiddenID
	for _, list := range [][]policy.ConsentPath{c.FolderNever, c.Deny} {
		for _, p := range list {
			if fi, err := os.Lstat(p.Path); err == nil {
				dev, ino := fileID(fi)
				out = append(out, hiddenID{p.Path, p.Field, dev, ino})
			}
		}
	}
	return out
}

// checkHidden says which hidden path moved since the broker started
// (gone from its path, or another file there), if any.
func checkHidden(hs []hiddenID) error {
	for _, h := range hs {
		fi, err := os.Lstat(h.path)
		if err == nil {
			if dev, ino := fileID(fi); dev == h.dev && ino == h.ino {
				continue
			}
		}
		return fmt.Errorf("%s (%s) is no longer where it was when the session started (moved or replaced: a renamed parent would carry it where no mask is placed); no folder is granted in this session any more", h.path, h.field)
	}
	return nil
}
