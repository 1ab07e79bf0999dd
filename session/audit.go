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
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	var best policy.PathGrant
	for _, g := range res.Grants {
		if within(abs, g.Path) && len(g.Path) > len(best.Path) {
			best = g
		}
	}
	if best.Access == policy.AccessReadWrite {
		return fmt.Errorf("audit log %s is inside %s, which the sandbox can write (%s): the workload could rewrite it; %s", path, best.Path, best.Field, fix)
	}
	return nil
}

// within reports whether path is dir or lies under it. filepath.Rel makes
// it portable: separators, and case-insensitive names on Windows.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && !filepath.IsAbs(rel) && rel != ".." && !(len(rel) > 2 && rel[:3] == ".."+string(filepath.Separator))
}
