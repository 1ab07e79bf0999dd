//go:build linux

package egress

// Benchmarks of inspected (TLS-terminating) CONNECT tunnels against direct
// TLS to the same loopback origin, and passthrough (spliced) tunnels to it,
// interleaved like bench_test.go's. The origin is startOrigin's; the
// inspected rule is read-only with a deny rule, so every request goes
// through the whole decision.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

const benchHost = "api.allowed.test"

// benchOrigin serves /small ("ok"), /bulk (bulkSize bytes, with their
// length) and /hold (waits for release, then "ok"; holding counts the
// requests waiting).
type benchOrigin struct {
	*origin
	holding atomic.Int64
	mu      sync.Mutex
	release chan struct{}
}

func startBenchOrigin(b testing.TB, h2 bool) *benchOrigin {
	bo := &benchOrigin{release: make(chan struct{})}
	bo.origin = startOrigin(b, benchHost, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bulk":
			w.Header().Set("Content-Length", strconv.Itoa(bulkSize))
			for sent := 0; sent < bulkSize; sent += len(bulkBuf) {
				if _, err := w.Write(bulkBuf); err != nil {
					return
				}
			}
		case "/hold":
			bo.mu.Lock()
			rel := bo.release
			bo.mu.Unlock()
			bo.holding.Add(1)
			select {
			case <-rel:
			case <-r.Context().Done():
			}
			bo.holding.Add(-1)
			io.WriteString(w, "ok")
		default:
			io.WriteString(w, "ok")
		}
	}))
	return bo
}

// releaseHeld lets the held requests answer; later ones are held again.
func (bo *benchOrigin) releaseHeld() {
	bo.mu.Lock()
	close(bo.release)
	bo.release = make(chan struct{})
	bo.mu.Unlock()
}

// benchPaths are three ways to the origin: direct (TLS to 127.0.0.1,
// trusting the origin's certificate), inspected (through a proxy that
// terminates TLS, trusting the sandbox CA) and passthrough (through a
// proxy that splices, trusting the origin's certificate).
type benchPaths struct {
	o                 *benchOrigin
	insp, pass        *testProxy
	caRoots           *x509.CertPool
	base              string // https://api.allowed.test:PORT
	newDirect         func() *http.Transport
	newInsp, newPass  func() *http.Transport
	direct, inspected *http.Client
	passthrough       *http.Client
}

func newBenchPaths(b testing.TB, h2 bool) *benchPaths {
	// The origin's HTTP/2 server logs to the standard logger when a peer
	// hangs up before its preface (the proxy's probe of the upstream's
	// protocol); a line inside a benchmark's result would break
	// bench/egress.sh's parsing.
	log.SetOutput(io.Discard)
	b.Cleanup(func() { log.SetOutput(os.Stderr) })
	o := startBenchOrigin(b, h2)
	pol := Policy{
		Allow:        []Rule{{Host: benchHost, Ports: []int{o.port}, Access: l7.ReadOnly, DenyRules: []l7.Rule{{Path: "/admin/**"}}}},
		AllowPrivate: []Rule{{Host: "127.0.0.1/32"}},
		Hosts:        map[string]string{benchHost: "127.0.0.1"},
	}
	ca := mustCA(b, pol)
	bp := &benchPaths{o: o, base: "https://" + benchHost + ":" + itoa(o.port), caRoots: x509.NewCertPool()}
	bp.caRoots.AddCert(ca.Certificate())
	bp.insp = startProxy(b, Config{Policy: pol, CA: ca, UpstreamRoots: o.roots, Log: func(Decision) {}})
	passPol := pol
	passPol.Allow = []Rule{{Host: benchHost, Ports: []int{o.port}}}
	bp.pass = startProxy(b, Config{Policy: passPol, Log: func(Decision) {}})
	addr := "127.0.0.1:" + itoa(o.port)
	bp.newDirect = func() *http.Transport {
		return &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
			TLSClientConfig: &tls.Config{RootCAs: o.roots}, ForceAttemptHTTP2: h2,
		}
	}
	through := func(p *testProxy, roots *x509.CertPool) func() *http.Transport {
		return func() *http.Transport {
			return &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + p.addr)), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
		}
	}
	bp.newInsp, bp.newPass = through(bp.insp, bp.caRoots), through(bp.pass, o.roots)
	client := func(tr *http.Transport) *http.Client {
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	bp.direct, bp.inspected, bp.passthrough = client(bp.newDirect()), client(bp.newInsp()), client(bp.newPass())
	// Each path speaks the protocol asked for, end to end, and the
	// inspected one is inspected.
	want := map[bool]int{false: 1, true: 2}[h2]
	for _, c := range []*http.Client{bp.direct, bp.inspected, bp.passthrough} {
		resp, err := c.Get(bp.base + "/small")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != want {
			b.Fatalf("GET /small: %d over %s, want 200 over HTTP/%d", resp.StatusCode, resp.Proto, want)
		}
	}
	if resp, err := bp.inspected.Get(bp.base + "/admin/x"); err != nil || resp.StatusCode != 403 {
		b.Fatalf("inspected GET /admin/x (a deny rule): %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if n := bp.o.hits.Load(); n != 3 {
		b.Fatalf("the origin saw %d requests, want 3", n)
	}
	return bp
}

func protoName(h2 bool) string {
	if h2 {
		return "h2"
	}
	return "h1"
}

// BenchmarkInspectedRequest: a small keep-alive GET over TLS, direct,
// through an inspected tunnel and through a passthrough one (HTTP/1.1,
// and HTTP/2 on both legs). Target: inspected-added-us < 250.
func BenchmarkInspectedRequest(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(protoName(h2), func(b *testing.B) {
			bp := newBenchPaths(b, h2)
			u := bp.base + "/small"
			secs, _ := interleave(b,
				func() { doGet(b, bp.direct, u) },
				func() { doGet(b, bp.inspected, u) },
				func() { doGet(b, bp.passthrough, u) })
			reportLatency(b, []string{"direct", "inspected", "passthrough"}, secs)
		})
	}
}

// BenchmarkInspectedDownload: a 64 MiB response over TLS on a kept-alive
// connection, the same three ways. Targets: inspected-pct >= 50,
// passthrough-pct >= 80.
func BenchmarkInspectedDownload(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(protoName(h2), func(b *testing.B) {
			bp := newBenchPaths(b, h2)
			u := bp.base + "/bulk"
			buf := make([]byte, 256<<10) // not io.Discard's 8 KiB
			get := func(c *http.Client) func() {
				return func() {
					resp, err := c.Get(u)
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, buf)
					resp.Body.Close()
					if err != nil || n != bulkSize || resp.StatusCode != 200 {
						b.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
					}
				}
			}
			wall, cpu := interleave(b, get(bp.direct), get(bp.inspected), get(bp.passthrough))
			reportThroughput(b, []string{"direct", "inspected", "passthrough"}, wall, cpu, bulkSize)
		})
	}
}

// BenchmarkInspectedHandshake: a new connection until its TLS handshake
// is done (h2 and http/1.1 offered, as curl and Go do; the origin
// speaks HTTP/1.1): TCP and TLS direct; TCP, CONNECT and TLS
// through an inspected tunnel, with the proxy's cached leaf and the
// upstream's protocol known ("inspected"), and as to a host the proxy
// never saw ("inspected-new-host": a second inspecting proxy that forgets
// both before each, so a leaf is minted and the upstream's protocol
// learned by a TLS handshake with it on the way); the same through a
// passthrough tunnel. Target: inspected-p50-us < 2000.
func BenchmarkInspectedHandshake(b *testing.B) {
	bp := newBenchPaths(b, false)
	fresh := startProxy(b, Config{Policy: bp.insp.cfg.Policy, CA: mustCA(b, bp.insp.cfg.Policy), UpstreamRoots: bp.o.roots, Log: func(Decision) {}})
	freshRoots := x509.NewCertPool()
	freshRoots.AddCert(fresh.cfg.CA.Certificate())
	forget := func() {
		ca, in := fresh.cfg.CA, fresh.insp
		ca.mu.Lock()
		if e, ok := ca.leaves[benchHost]; ok {
			ca.lru.Remove(e)
			delete(ca.leaves, benchHost)
		}
		ca.mu.Unlock()
		in.mu.Lock()
		clear(in.alpn)
		in.mu.Unlock()
	}
	hs := func(c net.Conn, roots *x509.CertPool) {
		tc := tls.Client(c, &tls.Config{ServerName: benchHost, RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
		if err := tc.Handshake(); err != nil {
			b.Fatal(err)
		}
		tc.Close()
	}
	through := func(p *testProxy, roots *x509.CertPool, before func()) func() {
		return func() {
			before()
			c, err := net.Dial("tcp", p.addr)
			if err != nil {
				b.Fatal(err)
			}
			io.WriteString(c, "CONNECT "+benchHost+":"+itoa(bp.o.port)+" HTTP/1.1\r\n\r\n")
			reply := make([]byte, len(connectOK))
			if _, err := io.ReadFull(c, reply); err != nil || string(reply) != connectOK {
				b.Fatalf("%q %v", reply, err)
			}
			hs(c, roots)
		}
	}
	direct := func() {
		c, err := net.Dial("tcp", "127.0.0.1:"+itoa(bp.o.port))
		if err != nil {
			b.Fatal(err)
		}
		hs(c, bp.o.roots)
	}
	secs, _ := interleave(b, direct, through(bp.insp, bp.caRoots, func() {}),
		through(fresh, freshRoots, forget), through(bp.pass, bp.o.roots, func() {}))
	reportLatency(b, []string{"direct", "inspected", "inspected-new-host", "passthrough"}, secs)
}

func mustCA(b testing.TB, p Policy) *CA {
	ca, err := NewCA(p)
	if err != nil {
		b.Fatal(err)
	}
	return ca
}

// BenchmarkLeafMint: minting one leaf (a new host each time); ns/op.
// Target < 0.5 ms.
func BenchmarkLeafMint(b *testing.B) {
	ca := mustCA(b, Policy{Allow: []Rule{{Host: "*.allowed.test", Inspect: true}}})
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		if _, err := ca.mint("h"+strconv.Itoa(i)+".allowed.test", now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeafCached: the leaf of a host already minted (what every
// later connection to it costs); it must be the same certificate.
func BenchmarkLeafCached(b *testing.B) {
	ca := mustCA(b, Policy{Allow: []Rule{{Host: benchHost, Inspect: true}}})
	first, err := ca.leaf(benchHost)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if l, _ := ca.leaf(benchHost); l != first {
			b.Fatal("the leaf was minted again")
		}
	}
}

// BenchmarkInspectedConns1000 opens 1000 inspected HTTP/1.1 connections
// at once, each with a request held at the origin ("active"), lets them
// answer (the connections stay open: "idle"), then closes them; three
// times, after one such round with 1000 direct TLS connections. It
// reports the process's heap and stacks per connection in each state,
// the proxy's share with requests in flight (inspected minus direct: the
// same clients and origin handlers; the proxy holds a client-facing and
// an upstream connection for each), and what is left after close against
// the state before: goroutines and fds must be back to it, and the live
// heap must not grow from the first round to the last (what the first
// leaves is the runtime's goroutine records and maps at their high-water
// size). The proxy's idle upstream pool, bounded by MaxIdleConnsPerHost,
// is closed with the clients' connections.
func BenchmarkInspectedConns1000(b *testing.B) {
	const N, rounds = 1000, 3
	raiseNofile(b, 6*N+512)
	bp := newBenchPaths(b, false)
	type snap struct {
		memSnap
		g, fds int
	}
	now := func() snap { return snap{memNow(), runtime.NumGoroutine(), countFDs(b)} }
	// back waits (up to 10 s) for goroutines and fds to be down to s's.
	back := func(s snap) snap {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if runtime.NumGoroutine() <= s.g && countFDs(b) <= s.fds {
				break
			}
		}
		return now()
	}
	round := func(newTr func() *http.Transport) (active, idle snap) {
		tr := newTr()
		tr.MaxIdleConnsPerHost = N
		c := &http.Client{Transport: tr, Timeout: time.Minute}
		var wg sync.WaitGroup
		errs := make(chan error, N)
		for i := 0; i < N; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(bp.base + "/hold")
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
				}
			}()
		}
		for deadline := time.Now().Add(time.Minute); bp.o.holding.Load() < N; time.Sleep(10 * time.Millisecond) {
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d requests reached the origin", bp.o.holding.Load(), N)
			}
		}
		active = now()
		bp.o.releaseHeld()
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		idle = now()
		tr.CloseIdleConnections()
		bp.insp.insp.tr.CloseIdleConnections()
		return active, idle
	}
	kib := func(x, base uint64) float64 { return (float64(x) - float64(base)) / 1024 }
	for i := 0; i < b.N; i++ {
		base := now()
		dActive, dIdle := round(bp.newDirect)
		back(base)
		var iActive, iIdle snap
		var left []snap
		for k := 0; k < rounds; k++ {
			iActive, iIdle = round(bp.newInsp)
			left = append(left, back(base))
		}
		last := left[rounds-1]
		if last.g > base.g || last.fds > base.fds {
			b.Errorf("after closing the connections: %d goroutines and %d fds, %d and %d before", last.g, last.fds, base.g, base.fds)
		}
		growth := kib(last.live, left[0].live)
		if growth > 1024 {
			b.Errorf("the live heap grew by %.0f KiB from the first round's close to the last's", growth)
		}
		b.ReportMetric(kib(dActive.heap, base.heap)/N, "direct-active-KiB/conn")
		b.ReportMetric(kib(iActive.heap, base.heap)/N, "inspected-active-KiB/conn")
		b.ReportMetric(kib(iActive.heap, dActive.heap)/N, "proxy-active-KiB/conn")
		b.ReportMetric(kib(iActive.stack, dActive.stack)/N, "proxy-active-stack-KiB/conn")
		b.ReportMetric(kib(iActive.rss, dActive.rss)/N, "proxy-active-RSS-KiB/conn")
		b.ReportMetric(kib(dIdle.heap, base.heap)/N, "direct-idle-KiB/conn")
		b.ReportMetric(kib(iIdle.heap, base.heap)/N, "inspected-idle-KiB/conn")
		b.ReportMetric(float64(max(0, last.g-base.g)), "goroutines-left")
		b.ReportMetric(float64(max(0, last.fds-base.fds)), "fds-left")
		b.ReportMetric(kib(left[0].live, base.live), "live-heap-left-KiB")
		b.ReportMetric(growth, "live-heap-growth-KiB")
	}
}
