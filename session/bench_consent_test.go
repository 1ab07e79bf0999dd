//go:build linux

package session_test

// Benchmarks of consent in a real linux sandbox opened through
// session.Open (issue 17, "Performance"): a folder grant from the
// approval (consent.Broker.Decide) to effective (< 5 ms p50), a host
// grant (< 2 ms p50), and an approval's visibility to a waiting request
// (Broker.Wait and the workload's HTTP long-poll; p50 <= 1 s). Each
// iteration also times a baseline in the same sandbox, interleaved, so
// the ratio is of one run: a bare provider GrantFolder for folders, a
// deny (the broker's decision without applying anything) for hosts and
// for the wake-up. bench/consent.sh runs them.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/internal/testworkload"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/session"
)

// TestMain lets the test binary be what the corral binary is to the
// linux provider (Start runs /proc/self/exe as the sandbox's init, the
// idmap helper, the slot holder, a persistent supervisor).
func TestMain(m *testing.M) {
	testworkload.Main() // credential source commands (credentials_test.go)
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case linux.InitArg:
			linux.InitMain()
		case linux.HoldArg:
			linux.HoldMain()
		case linux.PersistArg:
			linux.PersistMain()
		case linux.SlotsArg:
			linux.SlotsMain()
		}
	}
	os.Exit(m.Run())
}

// benchSession opens a linux sandbox (network proxy, nothing allowed)
// whose consent ceiling lets it ask for folders under the returned
// directory (read-only) and for any port of *.bench.test; the bounds
// are as loose as the policy allows, so that no iteration is rate
// limited. An approver is connected (its events drained).
func benchSession(b *testing.B) (*session.Session, *consent.Broker, string) {
	b.Helper()
	dirs := make([]string, 4)
	for i := range dirs {
		d, err := os.MkdirTemp("", "consent-bench-") // not b.TempDir: its parent is 0700
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, 0o755); err != nil {
			b.Fatal(err)
		}
		dirs[i] = d
	}
	wd, home, src, state := dirs[0], dirs[1], dirs[2], dirs[3]
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("bench\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	pol := policy.Default()
	for _, l := range linux.New().Capabilities(context.Background()).Layers {
		if l.State == provider.LayerUnavailable {
			pol.Layers[l.Layer] = policy.Optional
		}
	}
	pol.Network.Mode = policy.NetworkProxy
	pol.Consent = &policy.Consent{
		Folders:    &policy.ConsentFolders{Ask: []string{src + "/**"}},
		Hosts:      &policy.ConsentHosts{Ask: []string{"*.bench.test:*"}},
		MaxPending: policy.MaxConsentMaxPending,
		Rate:       &policy.ConsentRate{Burst: policy.MaxConsentBurst, Per: policy.Duration(time.Millisecond)},
		Persist:    filepath.Join(state, "grants.yaml"),
	}
	r, err := pol.Resolve(policy.Context{Home: home, Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH, "LANG=C"}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	plan, loss := linux.New().Map(ctx, r)
	if loss.HasErrors() {
		b.Fatal(provider.Rejected(loss))
	}
	s, err := session.Open(ctx, session.Config{Provider: linux.New(), Plan: plan})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	br := s.Consent()
	if br == nil {
		b.Fatal("no consent broker")
	}
	events, cancel := br.Watch()
	b.Cleanup(cancel)
	go func() {
		for range events {
		}
	}()
	return s, br, src
}

var who = consent.Requester{Via: "bench"}

// pendingAsk asks a and fails unless it is pending.
func pendingAsk(b *testing.B, br *consent.Broker, a consent.Ask) consent.Request {
	b.Helper()
	r, err := br.Ask(context.Background(), a, who)
	if err != nil || r.State != consent.StatePending {
		b.Fatalf("ask %+v: %+v %v, want pending", a, r, err)
	}
	return r
}

func approve(r consent.Request) consent.Decision {
	return consent.Decision{Approve: true, Scope: consent.ScopeOnce, Digest: r.Digest, By: "bench"}
}

func deny(r consent.Request) consent.Decision {
	return consent.Decision{Digest: r.Digest, By: "bench"}
}

// decideTimed decides r with d and returns how long Decide took; an
// approval must come back effective.
func decideTimed(b *testing.B, br *consent.Broker, r consent.Request, d consent.Decision) (time.Duration, consent.Request) {
	b.Helper()
	t0 := time.Now()
	got, err := br.Decide(context.Background(), r.ID, d)
	el := time.Since(t0)
	if err != nil || (d.Approve && (got.State != consent.StateApproved || !got.Effective)) {
		b.Fatalf("decide %s: %+v %v", r.ID, got, err)
	}
	return el, got
}

// report gives p50 and p95 (µs) of each series and the p50 ratio of the
// measured one to its baseline.
func report(b *testing.B, measured []time.Duration, mname string, base []time.Duration, bname string) {
	b.ReportMetric(us(pctl(measured, 50)), mname+"-p50-µs")
	b.ReportMetric(us(pctl(measured, 95)), mname+"-p95-µs")
	b.ReportMetric(us(pctl(base, 50)), bname+"-p50-µs")
	b.ReportMetric(us(pctl(base, 95)), bname+"-p95-µs")
	if p := pctl(base, 50); p > 0 {
		b.ReportMetric(float64(pctl(measured, 50))/float64(p), "ratio-p50")
	}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func pctl(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// BenchmarkConsentFolderGrant: a read-only folder grant from the
// approval (Decide: the digest checked, the folder looked up again, the
// slot holder's mount, the read-back of the sandbox's mountinfo) to
// effective; baseline bare-grant, the provider's GrantFolder alone of
// the same folder in the same sandbox. Both are revoked outside the
// timing.
func BenchmarkConsentFolderGrant(b *testing.B) {
	s, br, src := benchSession(b)
	lg, ok := s.Sandbox().(provider.LiveGrants)
	if !ok {
		b.Fatal("the linux sandbox takes no live grants")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(src, &st); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var decided, bare []time.Duration
	i := 0
	for b.Loop() {
		r := pendingAsk(b, br, consent.Ask{Kind: consent.KindFolder, Target: src, Reason: "bench"})
		el, got := decideTimed(b, br, r, approve(r))
		decided = append(decided, el)
		if _, err := br.Revoke(ctx, got.Grant, "bench", false); err != nil {
			b.Fatal(err)
		}
		g := provider.FolderGrant{Label: fmt.Sprintf("bare%d", i), Source: src, Dev: st.Dev, Ino: st.Ino, ReadOnly: true}
		i++
		t0 := time.Now()
		gs, err := lg.GrantFolder(ctx, g)
		bare = append(bare, time.Since(t0))
		if err != nil || gs.State != provider.GrantEffective {
			b.Fatalf("bare grant: %+v %v", gs, err)
		}
		if _, err := lg.RevokeFolder(ctx, g.Label, false); err != nil {
			b.Fatal(err)
		}
	}
	report(b, decided, "decide", bare, "bare-grant")
}

// BenchmarkConsentHostGrant: a host grant from the approval (Decide:
// the proxy rebuilt with one more allow entry, switched in keeping its
// connections, the rule read back from the proxy taking new
// connections) to effective; baseline deny, Decide denying a request
// for another host (the broker's part alone). The grant is revoked
// outside the timing, so the rules stay one entry long.
func BenchmarkConsentHostGrant(b *testing.B) {
	_, br, _ := benchSession(b)
	ctx := context.Background()
	var decided, denied []time.Duration
	i := 0
	for b.Loop() {
		r := pendingAsk(b, br, consent.Ask{Kind: consent.KindHost, Target: fmt.Sprintf("h%d.bench.test:443", i)})
		el, got := decideTimed(b, br, r, approve(r))
		decided = append(decided, el)
		if _, err := br.Revoke(ctx, got.Grant, "bench", false); err != nil {
			b.Fatal(err)
		}
		d := pendingAsk(b, br, consent.Ask{Kind: consent.KindHost, Target: fmt.Sprintf("d%d.bench.test:443", i)})
		el, _ = decideTimed(b, br, d, deny(d))
		denied = append(denied, el)
		i++
	}
	report(b, decided, "decide", denied, "deny")
}

// BenchmarkConsentWaitWake: how soon a request waiting for its decision
// sees an approval (a folder grant: the wait answers only once it is
// read back effective), from the call of Decide to the waiter's return:
// wait-approve through Broker.Wait, http-approve through the workload's
// long-poll (GET /v1/requests/ID/wait of consent.SandboxHandler on a
// loopback listener, the handler the session serves inside the
// sandbox); baseline wait-deny, the same wake-up for a deny (nothing to
// apply).
func BenchmarkConsentWaitWake(b *testing.B) {
	_, br, src := benchSession(b)
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: consent.SandboxHandler(br, func(*http.Request) consent.Requester { return who })}
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(func() { _ = srv.Close() })
	hc := &http.Client{Transport: &http.Transport{}}
	base := "http://" + l.Addr().String()
	// waitFor starts a waiter of r (HTTP or the broker) and returns a
	// channel that gets the time it returned.
	waitFor := func(r consent.Request, overHTTP bool) <-chan time.Time {
		ready, woke := make(chan struct{}), make(chan time.Time, 1)
		go func() {
			if overHTTP {
				req, _ := http.NewRequest("GET", base+"/v1/requests/"+r.ID+"/wait?timeout=60", nil)
				close(ready)
				resp, err := hc.Do(req)
				at := time.Now()
				if err == nil {
					resp.Body.Close()
				}
				woke <- at
				return
			}
			close(ready)
			_, _ = br.Wait(ctx, r.ID, time.Minute)
			woke <- time.Now()
		}()
		<-ready
		time.Sleep(2 * time.Millisecond) // let the waiter block (outside the timing)
		return woke
	}
	var brokerApprove, httpApprove, denyWake []time.Duration
	round := func(overHTTP, approveIt bool) time.Duration {
		r := pendingAsk(b, br, consent.Ask{Kind: consent.KindFolder, Target: src})
		woke := waitFor(r, overHTTP)
		d := deny(r)
		if approveIt {
			d = approve(r)
		}
		t0 := time.Now()
		got, err := br.Decide(ctx, r.ID, d)
		if err != nil {
			b.Fatal(err)
		}
		at := <-woke
		if approveIt {
			if _, err := br.Revoke(ctx, got.Grant, "bench", false); err != nil {
				b.Fatal(err)
			}
		}
		return at.Sub(t0)
	}
	for b.Loop() {
		brokerApprove = append(brokerApprove, round(false, true))
		httpApprove = append(httpApprove, round(true, true))
		denyWake = append(denyWake, round(false, false))
	}
	report(b, brokerApprove, "wait-approve", denyWake, "wait-deny")
	b.ReportMetric(us(pctl(httpApprove, 50)), "http-approve-p50-µs")
	b.ReportMetric(us(pctl(httpApprove, 95)), "http-approve-p95-µs")
}
