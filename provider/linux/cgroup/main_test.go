//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain gives the tests their own parent directory: corral runs of other
// test packages sweep "corral/run-<dead pid>-*" groups concurrently and
// would remove the stale groups these tests make on purpose.
func TestMain(m *testing.M) {
	parentName = fmt.Sprintf("corral-test-%d", os.Getpid())
	code := m.Run()
	for _, pattern := range []string{"/sys/fs/cgroup/*/" + parentName, "/sys/fs/cgroup/*/*/" + parentName, "/sys/fs/cgroup/*/*/*/" + parentName, "/sys/fs/cgroup/" + parentName} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
	os.Exit(code)
}
