package session

import (
	"fmt"
	"path/filepath"

	"github.com/corral-sandbox/corral/policy"
)

// CheckLogOutside refuses an audit log that the sandbox could write: one
// inside a read-write grant could be truncated or forged by the workload.
// fix says how to put it elsewhere.
func CheckLogOutside(path string, res *policy.Resolved, fix string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	// Links resolved in the deepest part of the path that exists: a
	// directory made later under a linked one is where the link points.
	rest := ""
	for dir := abs; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			abs = filepath.Join(real, rest)
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
	var best policy.PathGrant
	for _, g := range res.Grants {
		if policy.Within(abs, g.Path) && len(g.Path) > len(best.Path) {
			best = g
		}
	}
	if best.Access == policy.AccessReadWrite {
		return fmt.Errorf("audit log %s is inside %s, which the sandbox can write (%s): the workload could rewrite it; %s", path, best.Path, best.Field, fix)
	}
	return nil
}
