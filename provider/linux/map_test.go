//go:build linux

package linux

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

func resolved(grants ...policy.PathGrant) *policy.Resolved {
	return &policy.Resolved{Home: "/home/u", Workdir: "/w", Grants: grants, Network: policy.NetworkNone, Layers: policy.Layers{}}
}

func indexOf(ms []MountSpec, path string, kind MountKind) int {
	for i, m := range ms {
		if m.Path == path && m.Kind == kind {
			return i
		}
	}
	return -1
}

// Parents are mounted before children, so the most specific rule wins;
// the private home and /tmp come before grants below them.
func TestMountPlanOrder(t *testing.T) {
	ms, _, errs := mountPlan(resolved(
		policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/home/u/proj", Access: policy.AccessReadWrite, Dir: true},
		policy.PathGrant{Path: "/home/u/proj/.git/hooks", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/tmp/x", Access: policy.AccessReadWrite, Dir: true},
	))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	home, proj, hooks := indexOf(ms, "/home/u", MountTmpfs), indexOf(ms, "/home/u/proj", MountBind), indexOf(ms, "/home/u/proj/.git/hooks", MountBind)
	tmp, tmpx := indexOf(ms, "/tmp", MountTmpfs), indexOf(ms, "/tmp/x", MountBind)
	if home < 0 || proj < 0 || hooks < 0 || tmp < 0 || tmpx < 0 {
		t.Fatalf("missing mounts in %+v", ms)
	}
	if !(home < proj && proj < hooks && tmp < tmpx) {
		t.Errorf("order wrong: home %d proj %d hooks %d tmp %d tmp/x %d", home, proj, hooks, tmp, tmpx)
	}
	if !ms[hooks].ReadOnly || ms[proj].ReadOnly {
		t.Errorf("access wrong: proj ro=%v hooks ro=%v", ms[proj].ReadOnly, ms[hooks].ReadOnly)
	}
}

// A grant covered by a parent with the same access costs a mount for
// nothing; one with different access must stay.
func TestMountPlanSkipsRedundantBinds(t *testing.T) {
	ms, ll, _ := mountPlan(resolved(
		policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/usr/bin", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/usr/local", Access: policy.AccessReadWrite, Dir: true},
	))
	if indexOf(ms, "/usr/bin", MountBind) >= 0 {
		t.Error("/usr/bin bound again under read-only /usr")
	}
	if indexOf(ms, "/usr/local", MountBind) < 0 {
		t.Error("read-write /usr/local under read-only /usr was dropped")
	}
	if strings.Join(ll.RODirs, ",") != "/usr" {
		t.Errorf("landlock ro dirs = %v", ll.RODirs)
	}
}

// A grant inside a denied tree would reopen it: refused at plan time.
func TestMountPlanRejectsGrantInsideDeny(t *testing.T) {
	_, _, errs := mountPlan(resolved(
		policy.PathGrant{Path: "/data", Access: policy.AccessDeny, Dir: true, Field: "filesystem.deny[0]"},
		policy.PathGrant{Path: "/data/pub", Access: policy.AccessReadOnly, Dir: true, Field: "filesystem.read_only[0]"},
	))
	if len(errs) != 1 || errs[0].field != "filesystem.read_only[0]" || !strings.Contains(errs[0].msg, "inside denied /data") {
		t.Errorf("errs = %+v", errs)
	}
}

// Denied paths become masks, never binds of the real path.
func TestMountPlanDenyIsMask(t *testing.T) {
	ms, ll, _ := mountPlan(resolved(
		policy.PathGrant{Path: "/etc", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/etc/shadow", Access: policy.AccessDeny},
	))
	i := indexOf(ms, "/etc/shadow", MountMask)
	if i < 0 || indexOf(ms, "/etc/shadow", MountBind) >= 0 {
		t.Fatalf("want a mask and no bind for /etc/shadow: %+v", ms)
	}
	for _, f := range append(ll.ROFiles, ll.RWFiles...) {
		if f == "/etc/shadow" {
			t.Error("landlock grants the denied file")
		}
	}
}

// A required layer this host lacks is an error in the loss report; an
// optional one is a warning.
func TestMapLayerRequirement(t *testing.T) {
	p := New()
	h := p.facts()
	saved := h.landlockABI
	h.landlockABI = 0
	defer func() { h.landlockABI = saved }()
	r := resolved(policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true})
	_, loss := p.Map(context.Background(), r)
	if !hasLoss(loss, provider.SeverityError, "layers.landlock") {
		t.Errorf("required landlock on an ABI-0 host: %+v", loss)
	}
	r.Layers = policy.Layers{policy.LayerLandlock: policy.Optional}
	plan, loss := p.Map(context.Background(), r)
	if hasLoss(loss, provider.SeverityError, "layers.landlock") || !hasLoss(loss, provider.SeverityInfo, "layers.landlock") {
		t.Errorf("optional landlock on an ABI-0 host: %+v", loss)
	}
	if plan.Details.(*InitSpec).Landlock.Enabled {
		t.Error("landlock enabled in the plan although unavailable")
	}
}

func hasLoss(r provider.LossReport, sev provider.Severity, field string) bool {
	for _, l := range r {
		if l.Severity == sev && l.Field == field {
			return true
		}
	}
	return false
}

// Directories between a read-write root and a nested mount are pinned with
// self-binds so the workload cannot rename them away.
func TestMountPlanPinsAncestorsOfNestedMounts(t *testing.T) {
	ms, _, _ := mountPlan(resolved(
		policy.PathGrant{Path: "/w", Access: policy.AccessReadWrite, Dir: true},
		policy.PathGrant{Path: "/w/.git/hooks", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/w/a/b/secret", Access: policy.AccessDeny},
		policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/usr/x/y", Access: policy.AccessReadWrite, Dir: true},
	))
	for _, p := range []string{"/w/.git", "/w/a", "/w/a/b"} {
		i := indexOf(ms, p, MountBind)
		if i < 0 || ms[i].ReadOnly {
			t.Errorf("%s not pinned read-write: %+v", p, ms)
		}
		if i >= 0 && i > indexOf(ms, "/w/.git/hooks", MountBind) && p == "/w/.git" {
			t.Errorf("pin %s mounted after the path it holds", p)
		}
	}
	if indexOf(ms, "/usr/x", MountBind) >= 0 {
		t.Error("a directory inside a read-only bind was pinned (it cannot be renamed anyway)")
	}
}

// A workdir no grant covers is not visible inside: the command starts in
// the private home instead of failing on chdir.
func TestMapWorkdirNotGranted(t *testing.T) {
	r := resolved(policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true})
	plan, loss := New().Map(context.Background(), r)
	if got := plan.Details.(*InitSpec).Workdir; got != "/home/u" {
		t.Errorf("workdir = %q, want the home", got)
	}
	if !hasLoss(loss, provider.SeverityInfo, "filesystem.include_workdir") {
		t.Errorf("no info about the workdir: %+v", loss)
	}
	r.Grants = append(r.Grants, policy.PathGrant{Path: "/w", Access: policy.AccessReadWrite, Dir: true})
	plan, _ = New().Map(context.Background(), r)
	if got := plan.Details.(*InitSpec).Workdir; got != "/w" {
		t.Errorf("granted workdir = %q, want /w", got)
	}
}

// Map reports policy.Lint's findings (credentials, /usr, absent protected
// paths) as losses.
func TestMapReportsLint(t *testing.T) {
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	r := resolved(policy.PathGrant{Path: home, Access: policy.AccessReadOnly, Dir: true})
	r.Home = home
	lint := provider.LintLoss(r)
	if len(lint) < 2 {
		t.Fatalf("want the credentials and /usr findings: %+v", lint)
	}
	_, loss := New().Map(context.Background(), r)
	for _, l := range lint {
		if !slices.Contains(loss, l) {
			t.Errorf("%+v is not in the loss report %+v", l, loss)
		}
	}
}

// A grant of / is the parent of every other grant (policy.Within): one
// below it with the same access needs no bind of its own.
func TestMountPlanRootIsParent(t *testing.T) {
	ms, _, errs := mountPlan(resolved(
		policy.PathGrant{Path: "/", Access: policy.AccessReadOnly, Dir: true},
		policy.PathGrant{Path: "/usr", Access: policy.AccessReadOnly, Dir: true},
	))
	if len(errs) > 0 || indexOf(ms, "/", MountBind) < 0 || indexOf(ms, "/usr", MountBind) >= 0 {
		t.Errorf("want / bound and /usr covered by it: %+v %+v", ms, errs)
	}
}

// As root, read-only grants inside root's home are idmapped; a home of /
// makes none so (system directories keep their root-only files
// unreadable).
func TestMapHomeRootIdmapsNothing(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("idmapped binds are for a root caller")
	}
	r := resolved(policy.PathGrant{Path: "/etc", Access: policy.AccessReadOnly, Dir: true})
	r.Home = "/"
	plan, _ := New().Map(context.Background(), r)
	for _, m := range plan.Details.(*InitSpec).Mounts {
		if m.Path == "/etc" && m.IDMap {
			t.Errorf("/etc idmapped for a home of /: %+v", m)
		}
	}
}
