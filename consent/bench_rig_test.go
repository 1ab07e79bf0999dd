package consent

import (
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkApprovalToWaiter is the time from an approval (Decide, with a
// fake applier that reads back at once) to a waiting request's Wait
// returning it approved: the broker's share of "approval visible to a
// waiting request within 1 s p50" (issue 17). It reports p50 and p95.
func BenchmarkApprovalToWaiter(b *testing.B) {
	f := newRig(b, "")
	f.r.Consent.Burst, f.r.Consent.MaxPending = 1000, 100
	br := New(Config{Sandbox: "sb", Policy: f.r, Applier: f.app})
	defer br.Close()
	_, cancel := br.Watch()
	defer cancel()
	target := filepath.Join(f.src, "a")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		r, err := br.Ask(rigCtx, Ask{Kind: KindFolder, Target: target}, Requester{})
		if err != nil || r.State != StatePending {
			b.Fatalf("%+v %v", r, err)
		}
		got := make(chan time.Time)
		go func() {
			w, _ := br.Wait(rigCtx, r.ID, time.Minute)
			if w.State != StateApproved {
				b.Errorf("wait: %s", w.State)
			}
			got <- time.Now()
		}()
		b.StopTimer()
		time.Sleep(time.Millisecond) // the waiter parks on the request's change channel
		b.StartTimer()
		start := time.Now()
		q, err := br.Decide(rigCtx, r.ID, rigApprove(r))
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-got).Sub(start))
		if _, err := br.Revoke(rigCtx, q.Grant, "bench", false); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds()), "p95-µs")
}
