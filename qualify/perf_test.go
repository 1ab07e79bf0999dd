//go:build linux

package qualify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMedianAndShellJoin(t *testing.T) {
	ms := time.Millisecond
	if m := median([]time.Duration{5 * ms, 1 * ms, 3 * ms}); m != 3*ms {
		t.Errorf("odd median %v", m)
	}
	if m := median([]time.Duration{4 * ms, 1 * ms, 2 * ms, 3 * ms}); m != 2500*time.Microsecond {
		t.Errorf("even median %v", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("empty median %v", m)
	}
	if got := shellJoin([]string{"sh", "-c", "ls -R . >/dev/null", "it's"}); got != `sh -c 'ls -R . >/dev/null' 'it'\''s'` {
		t.Errorf("shellJoin: %s", got)
	}
}

// TestPerfWithStandIn runs the performance section against a stand-in
// corral that runs its command directly: every measure is filled in.
func TestPerfWithStandIn(t *testing.T) {
	if _, err := lookHostPath("git"); err != nil {
		t.Skip("git not installed")
	}
	bin := filepath.Join(t.TempDir(), "corral")
	// `run ... -- CMD...`: cd to -C and exec CMD.
	script := `#!/bin/sh
[ "$1" = run ] || exit 0
shift
while [ "$1" != -- ]; do
	[ "$1" = -C ] && cd "$2"
	shift
done
shift
exec "$@"
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	rs := &runState{opts: Options{PerfRuns: 3}, tmp: tmp, bin: bin, cgroupsOK: map[string]bool{}, policies: map[string]PolicyRecord{}}
	p := rs.perf(context.Background(), "linux")
	if p.Error != "" || p.ColdStart <= 0 || p.WarmStart <= 0 || p.CPU < 0 || p.PeakRSSKiB <= 0 {
		t.Fatalf("perf: %+v", p)
	}
	if len(p.Tools) != 3 {
		t.Fatalf("tools: %+v", p.Tools)
	}
	for _, tp := range p.Tools {
		if tp.Skipped != "" {
			continue
		}
		if tp.Error != "" || tp.Sandbox <= 0 || tp.Host <= 0 || tp.Ratio <= 0 {
			t.Errorf("%s: %+v", tp.Name, tp)
		}
	}
	if !strings.Contains(p.Tools[0].Command, "git status") {
		t.Errorf("first tool %q", p.Tools[0].Command)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("perf left %d entries in the run dir", len(ents))
	}
}
