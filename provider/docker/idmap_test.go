//go:build linux

package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// swapIDs exchanges 0 and w, keeps every other id of 0..2^32-2 and maps
// each once.
func TestSwapIDs(t *testing.T) {
	for _, w := range []int{1, 2, 1000, 65534, 4294967294} {
		m := swapIDs(w)
		total := 0
		at := func(id int) int {
			for _, r := range m {
				if id >= r.ContainerID && id < r.ContainerID+r.Size {
					return r.HostID + id - r.ContainerID
				}
			}
			return -1
		}
		for _, r := range m {
			total += r.Size
		}
		last := 4294967294
		if w == last {
			last = 0 // swapped
		}
		if total != 4294967295 || at(0) != w || at(w) != 0 || (w > 1 && at(1) != 1) || (w < 4294967294 && at(w+1) != w+1) || at(4294967294) != last {
			t.Errorf("swapIDs(%d) = %+v", w, m)
		}
	}
}

// rootRepo is a root-owned workdir (as root) holding a repository's .git,
// a set-user-ID file and a repository planted by uid 1000 in sub/.
func rootRepo(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a root caller's root-owned tree")
	}
	wd := t.TempDir()
	for _, d := range []string{".git", "sub/.git"} {
		if err := os.MkdirAll(filepath.Join(wd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "su"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(filepath.Join(wd, "su"), 0o4755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sub", "sub/.git"} {
		if err := os.Chown(filepath.Join(wd, p), 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	return wd
}

// A root caller's root-owned workdir is idmapped, with every bind of a
// path inside it (its .git, the nested one, placeholders, the set-id
// file, which is kept read-only), and the loss report says so; where it
// cannot be, nothing is, and the warning names git's refusal, why and the
// fix.
func TestMapIDMap(t *testing.T) {
	p := needDocker(t)
	wd := rootRepo(t)
	sp, loss := mapPolicy(t, p, "version: 1\n", wd)
	if !find(loss, provider.SeverityInfo, "filesystem.read_write", "idmapped mounts corral makes") || !find(loss, provider.SeverityInfo, "filesystem.read_write", wd) {
		t.Errorf("no info that %s is idmapped: %+v", wd, loss)
	}
	want := map[string]bool{wd: false, filepath.Join(wd, ".git"): true, filepath.Join(wd, "sub/.git"): true, filepath.Join(wd, "su"): true, filepath.Join(wd, ".bashrc"): true}
	for target, ro := range want {
		b, ok := bindAt(sp, target)
		if !ok || !b.IDMap || b.ReadOnly != ro || b.Source != target {
			t.Errorf("bind at %s = %+v (found %v), want idmapped, read-only %v", target, b, ok, ro)
		}
	}
	for _, b := range sp.Binds {
		if b.IDMap && (b.Mask || !policy.Within(b.Source, wd)) {
			t.Errorf("idmapped bind outside the tree or a mask: %+v", b)
		}
	}

	// A set-id file granted read-write by itself is never idmapped.
	su := filepath.Join(wd, "su")
	sp, loss = mapPolicy(t, p, "version: 1\nfilesystem: {read_write: ["+su+"]}\n", userDir(t))
	if b, ok := bindAt(sp, su); !ok || b.IDMap || b.ReadOnly || !find(loss, provider.SeverityWarning, "filesystem.read_write", "set-id or file-capability files owned by root are not idmapped") {
		t.Errorf("set-id file grant: bind %+v (%v), loss %+v", b, ok, loss)
	}

	// A tree that is not root's is the workload's: nothing to idmap.
	if sp, _ := mapPolicy(t, p, "version: 1\n", userDir(t)); hasIDMap(sp) {
		t.Errorf("a nobody-owned workdir is idmapped: %+v", sp.Binds)
	}

	saved := idmapProbe
	t.Cleanup(func() { idmapProbe = saved })
	idmapProbe = func([]string, int, int) string { return "no idmap here (test)" }
	sp, loss = mapPolicy(t, p, "version: 1\n", wd)
	if hasIDMap(sp) {
		t.Errorf("idmapped although the probe failed: %+v", sp.Binds)
	}
	if _, ok := bindAt(sp, filepath.Join(wd, "su")); ok {
		t.Error("the set-id file is bound although the tree is not idmapped")
	}
	for _, text := range []string{"dubious ownership", "no idmap here (test)", "chown them to an unprivileged user", wd} {
		if !find(loss, provider.SeverityWarning, "filesystem.read_write", text) {
			t.Errorf("no warning containing %q: %+v", text, loss)
		}
	}
}

func hasIDMap(sp *Spec) bool {
	for _, b := range sp.Binds {
		if b.IDMap {
			return true
		}
	}
	return false
}

// In a real container, a root caller's root-owned workdir is the
// workload's (uid 65534) and so is its .git; the repository uid 1000
// planted stays uid 1000's; a file the workload writes is root's on the
// host; set-id bits are refused and the set-id file cannot be written;
// Start verified the binds idmapped; and no mount stays behind.
func TestIDMapRun(t *testing.T) {
	p := needSandboxes(t)
	wd := rootRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := policy.Default().Resolve(policy.Context{Home: t.TempDir(), Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH}})
	if err != nil {
		t.Fatal(err)
	}
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	raw, err := p.Provision(ctx, plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb := raw.(*Sandbox)
	state := sb.state
	deprovisioned := false
	t.Cleanup(func() {
		if !deprovisioned {
			_ = sb.Deprovision(context.Background())
		}
	})
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	code, out := sh(t, sb, `id -u; stat -c '%u:%g' . .git sub sub/.git; echo hi > new; chmod 4755 new 2>/dev/null && echo SETUID; (echo x >> su) 2>/dev/null && echo WROTE-SU; true`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := strings.Join([]string{"65534", "65534:65534", "65534:65534", "1000:1000", "1000:1000"}, "\n")
	if !strings.HasPrefix(out, want+"\n") || strings.Contains(out, "SETUID") || strings.Contains(out, "WROTE-SU") {
		t.Errorf("inside:\n%s\nwant it to start with\n%s\nand no SETUID or WROTE-SU", out, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(wd, "new"), &st); err != nil || st.Uid != 0 || st.Gid != 0 || st.Mode&0o7000 != 0 {
		t.Errorf("the workload's file on the host: uid %d gid %d mode %o (%v), want root's without set-id bits", st.Uid, st.Gid, st.Mode, err)
	}
	if !strings.Contains(sb.layerDetail(policy.LayerMounts), "binds and masks") {
		t.Errorf("mounts layer: %+v", sb.Layers())
	}
	if !mountedAt(filepath.Join(state, idmapDir)) {
		t.Errorf("no idmapped clone under %s while the sandbox runs", state)
	}
	_ = sb.Stop(ctx)
	deprovisioned = true
	if err := sb.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	if mountedAt(state) {
		t.Errorf("a mount stays under %s after Deprovision", state)
	}
	if _, err := os.Stat(filepath.Join(wd, "new")); err != nil {
		t.Errorf("the workdir lost the workload's file with the state dir: %v", err)
	}
}

// layerDetail is the detail Start gave layer l.
func (s *Sandbox) layerDetail(l policy.Layer) string {
	for _, st := range s.Layers() {
		if st.Layer == l {
			return string(st.State) + ": " + st.Detail
		}
	}
	return ""
}
