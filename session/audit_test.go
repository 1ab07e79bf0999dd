package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-sandbox/corral/internal/wine"
	"github.com/corral-sandbox/corral/policy"
)

// An audit log under a read-write grant is refused, also when the grant
// names the real directory and the log's path goes through a link to it
// below a directory that does not exist yet.
func TestCheckLogOutside(t *testing.T) {
	wine.SkipArtifact(t, wine.NoSymlinks)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	res := &policy.Resolved{Grants: []policy.PathGrant{{Path: real, Access: policy.AccessReadWrite, Field: "filesystem.read_write[0]"}}}
	for path, refused := range map[string]bool{
		filepath.Join(real, "a.jsonl"):                true,
		filepath.Join(dir, "link", "logs", "a.jsonl"): true, // logs/ not made yet
		filepath.Join(dir, "elsewhere", "a.jsonl"):    false,
	} {
		if err := CheckLogOutside(path, res, "fix"); (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", path, err, refused)
		}
	}
}
