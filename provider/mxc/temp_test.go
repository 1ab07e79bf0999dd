package mxc

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// winPolicy is testPolicy for a Windows policy (the OS decides the
// private temp folder).
func winPolicy(set map[string]string) *policy.Resolved {
	r := testPolicy(policy.NetworkNone)
	p := policy.DefaultFor(policy.OSWindows)
	p.Process.Env.Set = set
	r.Policy = p
	return r
}

// TestPrivateTempFolder: a Windows policy's run gets TEMP and TMP naming a
// folder of its own, granted read-write in the document, present during
// the run and removed (with what the workload left) at Deprovision; a
// policy that sets TEMP keeps it and gets no folder.
func TestPrivateTempFolder(t *testing.T) {
	h := newHarness(t)
	p := h.provider(BackendProcessContainer)
	plan := mustPlan(t, p, winPolicy(nil))
	sb, err := p.Provision(context.Background(), plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one := sb.(*oneShot)
	tmp := one.temp
	if tmp == "" || !slices.Contains(one.req.Filesystem.ReadwritePaths, tmp) {
		t.Fatalf("no private temp folder granted read-write: %q, %+v", tmp, one.req.Filesystem)
	}
	res := run(t, sb, work("outln=$TEMP", "outln=$TMP"))
	if res.err != nil || res.stdout != tmp+"\n"+tmp+"\n" {
		t.Fatalf("TEMP/TMP in the workload: %q, %v (want %s)", res.stdout, res.err, tmp)
	}
	if err := os.WriteFile(tmp+string(os.PathSeparator)+"left", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.Deprovision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
		t.Errorf("temp folder %s after Deprovision: %v", tmp, err)
	}

	plan = mustPlan(t, p, winPolicy(map[string]string{"Temp": `D:\mine`}))
	sb, err = p.Provision(context.Background(), plan, provider.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Deprovision(context.Background())
	if one := sb.(*oneShot); one.temp != "" || one.req.Filesystem != nil && len(one.req.Filesystem.ReadwritePaths) > 0 {
		t.Errorf("a policy setting Temp got a private folder too: %q", one.temp)
	}
	for _, l := range plan.Loss {
		if strings.Contains(l.Message, "TEMP and TMP") {
			t.Errorf("the plan announces a private temp folder the run will not make: %s", l.Message)
		}
	}
}
