package session

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkHostGrant: a host grant from approval to effective (issue 17:
// < 2 ms p50). Each iteration builds the proxy for the rules with one
// more host (build-p50-us: what PrepareEgress does before the approval
// is applied), then times, from calling extend (or, for comparison,
// swap), the call alone (call-p50-us) and until a connection dialed
// then has its first request to the new host answered 200 by a loopback
// upstream through the proxy (effective-p50-us). A tunnel admitted
// under the old rules is held across each change: extend keeps it
// (checked), swap closes it (reopened outside the timing). none is the
// baseline: the same request once the grant is in force.
func BenchmarkHostGrant(b *testing.B) {
	for _, mode := range []string{"extend", "swap", "none"} {
		b.Run(mode, func(b *testing.B) {
			u := startUpstreams(b)
			names := []string{"base.test"}
			sw, addr := listenSwitch(b, newTestProxy(b, u.rulesAllowing(names...)))
			var builds, calls, effective []float64
			var held *proxyConn
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if held == nil {
					var bad string
					if held, bad = tunnel(b, addr, "base.test", u.echoPort); held == nil {
						b.Fatal(bad)
					}
				}
				// The rules grow by one host each time; a long run would
				// time the compilation of thousands of entries, so they
				// start again from the base every 64 grants.
				if len(names) > 64 {
					names = names[:1]
				}
				host := "g" + strconv.Itoa(i) + ".test"
				names = append(names, host)
				t0 := time.Now()
				p := newTestProxy(b, u.rulesAllowing(slices.Clone(names)...))
				builds = append(builds, time.Since(t0).Seconds())
				b.StartTimer()
				t1 := time.Now()
				var err error
				switch mode {
				case "extend":
					_, err = sw.extend(p)
				case "swap":
					err = sw.swap(p)
				default:
					// baseline: the host is granted already, nothing changes
					_, err = sw.extend(p)
					b.StopTimer()
					w := dialSwitch(b, addr)
					w.get(host, u.httpPort)
					w.Close()
					b.StartTimer()
					t1 = time.Now()
				}
				if err != nil {
					b.Fatal(err)
				}
				calls = append(calls, time.Since(t1).Seconds())
				c := dialSwitch(b, addr)
				code, body, gerr := c.get(host, u.httpPort)
				effective = append(effective, time.Since(t1).Seconds())
				b.StopTimer()
				c.Close()
				if code != 200 || gerr != nil {
					b.Fatalf("GET %s after %s: %d %q %v", host, mode, code, body, gerr)
				}
				if err := held.echo("held"); err != nil {
					if mode == "extend" {
						b.Fatalf("extend closed a tunnel admitted before: %v", err)
					}
					held.Close()
					held = nil
				} else if mode == "swap" {
					b.Fatal("swap kept a tunnel admitted under the old rules")
				}
				b.StartTimer()
			}
			b.StopTimer()
			if held != nil {
				held.Close()
			}
			b.ReportMetric(p50(effective)*1e6, "effective-p50-us")
			b.ReportMetric(p50(builds)*1e6, "build-p50-us")
			if mode != "none" {
				b.ReportMetric(p50(calls)*1e6, "call-p50-us")
			}
		})
	}
}

func p50(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
