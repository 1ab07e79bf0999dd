package session

import (
	"strconv"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/egress"
)

// The -v summary keeps at most maxDeniedKinds kinds of denial, and says
// how many it did not list.
func TestEgressStatsAreBounded(t *testing.T) {
	var l egressStats
	n := maxDeniedKinds + 50
	for i := 0; i < n; i++ {
		l.record(egress.Decision{Host: "h" + strconv.Itoa(i) + ".test", Port: 80, Reason: "no allow rule matches"})
	}
	l.record(egress.Decision{Allowed: true, Host: "ok.test", Port: 443})
	if len(l.denied) != maxDeniedKinds || l.other != n-maxDeniedKinds {
		t.Errorf("kinds %d, other %d", len(l.denied), l.other)
	}
	var b strings.Builder
	l.summary(&b)
	for _, want := range []string{"1 allowed, " + strconv.Itoa(n) + " denied", "50 denials of further kinds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
