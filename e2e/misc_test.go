//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// P05 (subset): with network none, the host's loopback listeners (TCP,
// UDP) and abstract unix sockets are unreachable and log nothing.
func TestP05_NetworkNone(t *testing.T) {
	var conns atomic.Int32
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			conns.Add(1)
		}
	}()
	abstract := "@corral-e2e-" + token()
	ua, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ua.Close() })
	go func() {
		for {
			c, err := ua.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	tcpAddr := ln.Addr().String()
	udpAddr := udp.LocalAddr().String()
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "p05")
		pol := writePolicy(t, id, policy{})
		targets := [][2]string{{"tcp", tcpAddr}, {"udp", udpAddr}, {"unix", abstract}, {"tcp", "[::1]:" + tcpAddr[strings.LastIndex(tcpAddr, ":")+1:]}}
		var script strings.Builder
		for _, tg := range targets {
			fmt.Fprintf(&script, "%s connect %s '%s'; ", probeBin, tg[0], tg[1])
		}
		res := corral(t, run{id: id, policy: pol, workdir: wd, args: sh(script.String())})
		assertCode(t, res, 0)
		for _, tg := range targets {
			v, ok := lineValue(res.stdout, "connect "+tg[0]+" "+tg[1])
			if !ok {
				t.Errorf("connect %s %s not probed\n%s", tg[0], tg[1], res)
				continue
			}
			if v == "ok" && tg[0] != "udp" { // a UDP send "succeeds" locally; the listener decides
				t.Errorf("connect %s %s succeeded inside with network none", tg[0], tg[1])
			}
		}
	})
	// eachIdent's subtests are parallel: they run after this function
	// returns, so the listeners are checked (and closed) in cleanups.
	t.Cleanup(func() {
		time.Sleep(300 * time.Millisecond)
		if n := conns.Load(); n != 0 {
			t.Errorf("the host listeners saw %d connections/datagrams from the sandbox", n)
		}
	})
}

// Exit status propagation and Corral's own codes.
func TestExitStatus(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "exit")
		pol := writePolicy(t, id, policy{})
		for _, c := range []struct {
			args []string
			want int
		}{
			{sh("exit 7"), 7},
			{sh("exit 0"), 0},
			{sh("kill -9 $$"), 137},
			{sh("kill -TERM $$"), 143},
			{[]string{"corral-e2e-no-such-command"}, 127},
			{[]string{"/nonexistent/bin/tool"}, 127},
		} {
			res := corral(t, run{id: id, policy: pol, workdir: wd, args: c.args})
			if res.code != c.want {
				t.Errorf("%q: exit %d, want %d\n%s", c.args, res.code, c.want, res)
			}
		}
	})
}

// --audit writes OCSF process activity events: a launch and a terminate
// with the exit code and the policy hash.
func TestAuditLog(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "audit")
		pol := writePolicy(t, id, policy{})
		logf := filepath.Join(mkdir(t, id, "audit-logs"), "audit.jsonl")
		res := corral(t, run{id: id, policy: pol, workdir: wd, flags: []string{"--audit", logf}, args: sh("exit 3")})
		assertCode(t, res, 3)
		f, err := os.Open(logf)
		if err != nil {
			t.Fatalf("audit log: %v\n%s", err, res)
		}
		defer f.Close()
		type ev struct {
			ClassUID   int  `json:"class_uid"`
			ActivityID int  `json:"activity_id"`
			ExitCode   *int `json:"exit_code"`
			Unmapped   struct {
				PolicyHash string `json:"policy_hash"`
				SandboxID  string `json:"sandbox_id"`
			} `json:"unmapped"`
		}
		var launch, term *ev
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			n++
			var e ev
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("line %d is not JSON: %v: %s", n, err, sc.Text())
			}
			if e.ClassUID != 1007 {
				t.Errorf("line %d: class_uid %d, want 1007", n, e.ClassUID)
			}
			switch e.ActivityID {
			case 1:
				launch = &e
			case 2:
				term = &e
			}
		}
		if launch == nil || term == nil {
			t.Fatalf("want a launch (activity_id 1) and a terminate (2) event; %d lines", n)
		}
		if term.ExitCode == nil || *term.ExitCode != 3 {
			t.Errorf("terminate exit_code %v, want 3", term.ExitCode)
		}
		for _, e := range []*ev{launch, term} {
			if !strings.HasPrefix(e.Unmapped.PolicyHash, "sha256:") {
				t.Errorf("event %d: unmapped.policy_hash %q, want sha256:...", e.ActivityID, e.Unmapped.PolicyHash)
			}
		}
	})
}
