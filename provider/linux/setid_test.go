//go:build linux

package linux

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/setid/setidtest"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// setIDFixture makes, in a root-owned directory, a set-uid file, a file
// with a security.capability attribute but no exec bit (chmod keeps the
// attribute, so the owner can make it executable) and a plain one.
func setIDFixture(t *testing.T) (dir, suid, capNoExec, plain string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("idmapped binds are for a root caller")
	}
	dir = t.TempDir()
	suid, capNoExec = setidtest.Files(t, dir, []byte("#!/bin/sh\n"))
	plain = filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, suid, capNoExec, plain
}

// planOf maps one read-write grant as a root caller whose workload is
// uid 65534 (so a root-owned grant is idmapped).
func planOf(t *testing.T, g policy.PathGrant) (*InitSpec, provider.LossReport) {
	t.Helper()
	r := resolved(g)
	r.RunAs = "65534"
	plan, loss := New().Map(context.Background(), r)
	return plan.Details.(*InitSpec), loss
}

// A read-write grant of one set-id or file-capability file of root's is
// refused: idmapped, the workload would own it and could write its content
// through mmap(2), which keeps the bits. A plain file is granted.
func TestMapRefusesSetIDFileGrant(t *testing.T) {
	_, suid, capNoExec, plain := setIDFixture(t)
	for _, p := range []string{suid, capNoExec, plain} {
		field := "filesystem.read_write[0]"
		spec, loss := planOf(t, policy.PathGrant{Path: p, Access: policy.AccessReadWrite, Field: field})
		refused := slices.ContainsFunc(loss.Errors(), func(l provider.Loss) bool {
			return l.Field == field && strings.Contains(l.Message, "set-uid, set-gid or file-capability file")
		})
		if want := p != plain; refused != want {
			t.Errorf("%s: refused %v, want %v: %+v", filepath.Base(p), refused, want, loss)
		}
		if p == plain {
			if i := indexOf(spec.Mounts, p, MountBind); i < 0 || !spec.Mounts[i].IDMap || spec.Mounts[i].ReadOnly {
				t.Errorf("plain file not granted read-write, idmapped: %+v", spec.Mounts)
			}
		}
	}
}

// In an idmapped read-write tree a file with a capability attribute but no
// exec bit is kept read-only, like a set-uid one.
func TestMapKeepsCapFileWithoutExecReadOnly(t *testing.T) {
	dir, suid, capNoExec, plain := setIDFixture(t)
	spec, loss := planOf(t, policy.PathGrant{Path: dir, Access: policy.AccessReadWrite, Dir: true, Field: "filesystem.read_write[0]"})
	if loss.HasErrors() {
		t.Fatalf("plan refused: %+v", loss)
	}
	for _, p := range []string{suid, capNoExec, plain} {
		i := indexOf(spec.Mounts, p, MountBind)
		if ro := i >= 0 && spec.Mounts[i].ReadOnly; ro != (p != plain) {
			t.Errorf("%s: bound read-only %v: %+v", filepath.Base(p), ro, spec.Mounts)
		}
	}
}

// The file an idmapped read-write file bind clones is vetted again at
// mount time, on the clone's fd: whatever the plan saw at the path, a
// set-id file is refused.
func TestPreClonesRefusesSetIDFile(t *testing.T) {
	needPureGo(t)
	_, suid, capNoExec, plain := setIDFixture(t)
	for _, p := range []string{suid, capNoExec, plain} {
		for _, dir := range []bool{false, true} { // what the plan took it for
			fds, err := preClones([]MountSpec{{Kind: MountBind, Path: p, Source: p, Dir: dir, IDMap: true}}, 65534, 65534, -1)
			for _, fd := range fds {
				unix.Close(fd)
			}
			if p == plain {
				if err != nil {
					t.Errorf("plain file: %v", err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "file-capability file of root's") {
				t.Errorf("%s (plan dir %v): want refused, got %v", filepath.Base(p), dir, err)
			}
		}
	}
	// Read-only, the bind is no danger.
	fds, err := preClones([]MountSpec{{Kind: MountBind, Path: suid, Source: suid, ReadOnly: true, IDMap: true}}, 65534, 65534, -1)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		t.Errorf("read-only idmapped bind of a set-id file: %v", err)
	}
}
