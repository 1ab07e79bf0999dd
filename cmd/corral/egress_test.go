package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/audit"
	"github.com/corral-sandbox/corral/egress"
)

// A workload decides how many decisions it causes: the summary keeps at
// most maxDeniedKinds kinds and the audit log at most maxAuditEvents
// events, and says what it cut.
func TestEgressLogIsBounded(t *testing.T) {
	sink, err := audit.Open(filepath.Join(t.TempDir(), "a.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	l := &egressLog{sink: sink, info: func() audit.RunInfo { return audit.RunInfo{} }}
	n := maxAuditEvents + 50
	for i := 0; i < n; i++ {
		l.record(egress.Decision{Host: "h" + strconv.Itoa(i) + ".test", Port: 80, Reason: "no allow rule matches"})
	}
	if len(l.denied) != maxDeniedKinds || l.other != n-maxDeniedKinds {
		t.Errorf("kinds %d, other %d", len(l.denied), l.other)
	}
	if l.events != maxAuditEvents || l.dropped != 50 {
		t.Errorf("events %d, dropped %d", l.events, l.dropped)
	}
	var b strings.Builder
	l.summary(&b)
	for _, want := range []string{"0 allowed, " + strconv.Itoa(n) + " denied", "50 decisions beyond", "further kinds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
