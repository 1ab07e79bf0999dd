package consent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A never path moved by renaming its parent (what a workload with a
// read-write grant above it can do: the mask moves along) makes every
// later folder grant fail; nothing is applied, so the new place is never
// granted unmasked.
func TestHiddenPathMovedRefusesGrants(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	moved := filepath.Join(f.src, "c2")
	if err := os.Rename(filepath.Join(f.src, "c"), moved); err != nil {
		t.Fatal(err)
	}
	r, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: moved}, Requester{Via: "tcp"})
	if err != nil || r.State != StatePending {
		t.Fatalf("ask: %+v %v", r, err)
	}
	r, err = b.Decide(rigCtx, r.ID, rigApprove(r))
	if err != nil || r.State != StateFailed || !strings.Contains(r.Detail, "no longer where it was") {
		t.Fatalf("decide: %+v %v", r, err)
	}
	if len(f.app.applied) != 0 {
		t.Fatalf("applied %+v", f.app.applied)
	}
}

// A hidden file replaced in its own directory (a host's passwd renames a
// new /etc/shadow over the old) moves no mask: grants go on.
func TestHiddenFileReplacedInPlaceKeepsGrants(t *testing.T) {
	f := newRig(t, "")
	b := f.broker(t, Config{})
	rigWatch(t, b)
	hidden := filepath.Join(f.src, "c", "never") // consent.folders.never[0]
	fi, err := os.Lstat(hidden)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hidden, hidden+".old"); err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() {
		err = os.Mkdir(hidden, 0o755)
	} else {
		err = os.WriteFile(hidden, []byte("new"), 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Ask(rigCtx, Ask{Kind: KindFolder, Target: f.src}, Requester{Via: "tcp"})
	if err != nil || r.State != StatePending {
		t.Fatalf("ask: %+v %v", r, err)
	}
	r, err = b.Decide(rigCtx, r.ID, rigApprove(r))
	if err != nil || r.State == StateFailed {
		t.Fatalf("decide after the hidden path was replaced in place: %+v %v", r, err)
	}
}
