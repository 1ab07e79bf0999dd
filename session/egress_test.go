package session

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

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

// ask sends one proxy request over l and returns the status line, or ""
// when the connection is closed unanswered.
func ask(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line
}

// After Close (a gateway's Detach, a session's end) the egress switch
// answers nothing, and a later swap (a live policy set racing the
// shutdown) cannot bring a proxy back.
func TestEgressSwitchStaysClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, err := egress.New(egress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sw := newEgressSwitch(l, p, "")
	if got := ask(t, l.Addr().String()); !strings.Contains(got, "403") {
		t.Fatalf("open switch: %q, want the proxy's 403", got)
	}
	sw.Close()
	if got := ask(t, l.Addr().String()); got != "" {
		t.Errorf("closed switch answered %q", got)
	}
	p2, _ := egress.New(egress.Config{})
	if err := sw.swap(p2); err == nil {
		t.Error("swap after Close succeeded")
	}
	if got := ask(t, l.Addr().String()); got != "" {
		t.Errorf("closed switch answered %q after a swap", got)
	}
}
