//go:build linux

package e2e

// The adversarial suite is qualify's (docs/qualify.md): its cases run here
// against the binary under test on each provider (and on service sessions
// and the gateway's linux sandboxes), as root and as the unprivileged
// user, one subtest per case (TestQualify/PROVIDER/IDENT/P05).

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/qualify"
)

// qualifySlots bounds the qualify runs at once; each runs its cases one
// after the other.
var qualifySlots = make(chan struct{}, 2)

func TestQualify(t *testing.T) {
	for _, prov := range []string{"linux", "docker", qualify.LinuxService, qualify.LinuxGateway} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			ids := identities()
			if prov == "docker" {
				ids = dockerIdents(t)
			}
			for _, id := range ids {
				t.Run(id.name, func(t *testing.T) {
					t.Parallel()
					qualifyAs(t, prov, id)
				})
			}
		})
	}
}

// qualifyAs runs the cases for prov as id: each case is a subtest, and
// only the ones a -run pattern selects are run.
func qualifyAs(t *testing.T, prov string, id *ident) {
	var selected []string
	results := map[string]chan qualify.Result{}
	for _, c := range qualify.Cases() {
		if prov == qualify.LinuxService && !slices.Contains(qualify.ServiceCases, c.ID) {
			continue
		}
		ch := make(chan qualify.Result, 1)
		results[c.ID] = ch
		t.Run(c.ID, func(t *testing.T) {
			selected = append(selected, c.ID)
			t.Parallel() // until the run below reports this case
			checkResult(t, prov, <-ch)
		})
	}
	if len(selected) == 0 {
		return
	}
	o := qualify.Options{Bin: corralBin, Providers: []string{prov}, Cases: selected, PerfRuns: -1}
	if id.uid != os.Geteuid() {
		o.User = &qualify.Identity{UID: id.uid, GID: id.gid, Groups: id.groups}
	}
	// The case subtests wait for this; it outlives the function.
	go func() {
		qualifySlots <- struct{}{}
		defer func() { <-qualifySlots }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		rep, err := qualify.Qualify(ctx, o)
		var got []qualify.Result
		if rep != nil && len(rep.Providers) == 1 {
			got = rep.Providers[0].Results
			if pr := rep.Providers[0]; pr.Skipped != "" {
				for i := range got {
					got[i].Reason = "provider skipped: " + pr.Skipped
				}
			}
		}
		for _, res := range got {
			results[res.ID] <- res
		}
		for _, cid := range selected {
			if !slices.ContainsFunc(got, func(r qualify.Result) bool { return r.ID == cid }) {
				results[cid] <- qualify.Result{ID: cid, Status: qualify.Fail, Reason: fmt.Sprintf("qualify did not report the case: %v", err)}
			}
		}
	}()
}

// checkResult fails t with the case's evidence, or skips it with the
// case's reason. A provider that qualify found unavailable fails the case,
// but docker's without CORRAL_TEST_DOCKER=1.
func checkResult(t *testing.T, prov string, res qualify.Result) {
	t.Helper()
	var ev strings.Builder
	for _, e := range res.Evidence {
		fmt.Fprintf(&ev, "\n  - %s\n    => %s", e.Attempt, strings.ReplaceAll(e.Got, "\n", "\n       "))
	}
	switch {
	case res.Status == qualify.Skipped && strings.HasPrefix(res.Reason, "provider skipped: ") && (prov != "docker" || os.Getenv("CORRAL_TEST_DOCKER") == "1"):
		t.Fatalf("%s %s: %s", res.ID, res.Title, res.Reason)
	case res.Status == qualify.Skipped:
		t.Skipf("%s %s: %s", res.ID, res.Title, res.Reason)
	case res.Status != qualify.Pass:
		t.Errorf("%s %s: %s: %s (%s)%s", res.ID, res.Title, res.Status, res.Reason, res.Duration, ev.String())
	case testing.Verbose():
		t.Logf("%s %s: pass (%s)%s", res.ID, res.Title, res.Duration, ev.String())
	}
}
