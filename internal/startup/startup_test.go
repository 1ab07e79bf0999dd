package startup

import (
	"strings"
	"testing"
	"time"
)

// Marks are recorded only once enabled, printed in time order with
// times since the first and since the one before, and Take hands over
// and forgets them.
func TestMarks(t *testing.T) {
	Add("supervisor", "before Enable")
	Merge([]Mark{{Proc: "init", Phase: "sent unasked", At: Now()}})
	if len(Take()) != 0 {
		t.Fatal("a mark was kept before Enable")
	}
	Enable()
	if d := sinceTimeInit(time.Now()); d <= 0 || d > time.Hour {
		t.Fatalf("sinceTimeInit = %v", d)
	}
	Add("supervisor", "first")
	Merge([]Mark{{Proc: "init", Phase: "earlier", At: Now() - int64(time.Millisecond)}})
	Add("supervisor", "last")
	var b strings.Builder
	Write(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 marks:\n%s", b.String())
	}
	for i, want := range []string{"init        earlier", "supervisor  first", "supervisor  last"} {
		if !strings.HasSuffix(lines[i+1], want) {
			t.Errorf("line %d: %q, want it to end %q", i+1, lines[i+1], want)
		}
	}
	if !strings.Contains(lines[1], "    0.000 (  +0.000)") || !strings.Contains(lines[3], "    1.0") {
		t.Errorf("times are not since the first mark:\n%s", b.String())
	}
	if ms := Take(); len(ms) != 3 || len(Take()) != 0 {
		t.Fatalf("Take: %d marks, then not empty", len(ms))
	}
}

// Begin records a process's start before its main, the main at the
// entry taken, and nothing unless enabled.
func TestBegin(t *testing.T) {
	Take()
	e := Enter()
	Begin("init", e)
	ms := Take()
	if !Enabled() && len(ms) != 0 {
		t.Fatalf("marks while disabled: %v", ms)
	}
	Enable()
	Begin("init", e)
	ms = Take()
	if len(ms) != 2 || ms[1].At != e.at || ms[0].At >= ms[1].At || ms[0].Phase != "process started (exec)" {
		t.Fatalf("Begin: %+v (entry at %d)", ms, e.at)
	}
}
