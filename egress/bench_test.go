//go:build linux

package egress

// Benchmarks of the proxy against going direct, each in one run: every
// iteration takes one sample of each path in turn (alternating which goes
// first), so both see the same machine, and the figures are the reported
// metrics (medians over the iterations; ratios are medians of each
// iteration's ratio), not ns/op. bench/egress.sh runs them and prints the
// table. Plain HTTP and raw tunnels here; inspected TLS in
// bench_inspect_test.go.

import (
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// median of xs (the upper one of an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// interleave runs each of fs once per iteration, in turn (the first one
// alternating), and returns each one's wall seconds per call and the
// process's CPU seconds (user + system, all threads: client, proxy and
// origin alike) per call.
func interleave(b *testing.B, fs ...func()) (wall, cpu [][]float64) {
	wall, cpu = make([][]float64, len(fs)), make([][]float64, len(fs))
	for _, f := range fs { // warm up: connections, leaves, ALPN, autotuning
		f()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range fs {
			j := (k + i) % len(fs)
			c0 := cpuNow()
			start := time.Now()
			fs[j]()
			wall[j] = append(wall[j], time.Since(start).Seconds())
			cpu[j] = append(cpu[j], cpuNow()-c0)
		}
	}
	b.StopTimer()
	return wall, cpu
}

// cpuNow is the process's user + system CPU seconds so far.
func cpuNow() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// reportLatency reports each path's median in µs ("NAME-p50-us") and each
// proxied path's added median against the first ("NAME-added-us").
func reportLatency(b *testing.B, names []string, secs [][]float64) {
	base := median(secs[0])
	for i, n := range names {
		m := median(secs[i])
		b.ReportMetric(m*1e6, n+"-p50-us")
		if i > 0 {
			b.ReportMetric((m-base)*1e6, n+"-added-us")
		}
	}
}

// reportThroughput reports each path's median MB/s for size bytes per
// call ("NAME-MB/s"), its CPU (all threads) per byte ("NAME-cpu-ns/B")
// and, for each later path, its throughput against the first, the median
// of the iterations' ratios ("NAME-pct").
func reportThroughput(b *testing.B, names []string, wall, cpu [][]float64, size int) {
	for i, n := range names {
		mbs, cns := make([]float64, len(wall[i])), make([]float64, len(wall[i]))
		for k, s := range wall[i] {
			mbs[k], cns[k] = float64(size)/s/1e6, cpu[i][k]*1e9/float64(size)
		}
		b.ReportMetric(median(mbs), n+"-MB/s")
		b.ReportMetric(median(cns), n+"-cpu-ns/B")
		if i > 0 {
			r := make([]float64, len(wall[i]))
			for k := range r {
				r[k] = 100 * wall[0][k] / wall[i][k]
			}
			b.ReportMetric(median(r), n+"-pct")
		}
	}
}

func doGet(tb testing.TB, c *http.Client, url string) {
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("%s: status %d", url, resp.StatusCode)
	}
}

// BenchmarkPlainRequest: a small keep-alive GET over plain HTTP, direct
// and through the proxy (absolute-form, no L7 rules).
func BenchmarkPlainRequest(b *testing.B) {
	up := startUpstream(b, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	tp := startProxy(b, Config{Policy: basicPolicy(up.port), Log: func(Decision) {}})
	direct := &http.Client{Transport: &http.Transport{}}
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + tp.addr))}}
	b.Cleanup(direct.CloseIdleConnections)
	b.Cleanup(proxied.CloseIdleConnections)
	du := "http://127.0.0.2:" + itoa(up.port) + "/small"
	pu := "http://api.allowed.test:" + itoa(up.port) + "/small"
	secs, _ := interleave(b, func() { doGet(b, direct, du) }, func() { doGet(b, proxied, pu) })
	reportLatency(b, []string{"direct", "proxied"}, secs)
}

// sinkServer reads each connection to EOF and answers with one byte.
func sinkServer(tb testing.TB, ip string) int {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Write([]byte{1})
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port
}

const bulkSize = 64 << 20

var bulkBuf = make([]byte, 256<<10)

// sendBulk writes bulkSize bytes, half-closes and waits for the ack.
func sendBulk(tb testing.TB, c net.Conn) {
	for sent := 0; sent < bulkSize; sent += len(bulkBuf) {
		if _, err := c.Write(bulkBuf); err != nil {
			tb.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		tb.Fatal(err)
	}
	c.Close()
}

// BenchmarkTunnelThroughput: 64 MiB over raw TCP, direct and through a
// CONNECT tunnel (the splice path), each on a new connection.
func BenchmarkTunnelThroughput(b *testing.B) {
	port := sinkServer(b, "127.0.0.2")
	tp := startProxy(b, Config{Policy: basicPolicy(port), Log: func(Decision) {}})
	direct := func() {
		c, err := net.Dial("tcp", "127.0.0.2:"+itoa(port))
		if err != nil {
			b.Fatal(err)
		}
		sendBulk(b, c)
	}
	tunnel := func() {
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(c, "CONNECT api.allowed.test:"+itoa(port)+" HTTP/1.1\r\n\r\n")
		reply := make([]byte, len(connectOK))
		if _, err := io.ReadFull(c, reply); err != nil || string(reply) != connectOK {
			b.Fatalf("%q %v", reply, err)
		}
		sendBulk(b, c)
	}
	wall, cpu := interleave(b, direct, tunnel)
	reportThroughput(b, []string{"direct", "tunnel"}, wall, cpu, bulkSize)
}

// memSnap is the process's memory: heap spans and stacks in use (heap),
// stacks alone, live heap objects and RSS, in bytes.
type memSnap struct{ heap, stack, live, rss uint64 }

// memNow takes a memSnap after two collections (the second empties
// sync.Pools' victim caches).
func memNow() memSnap {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memSnap{heap: ms.HeapInuse + ms.StackInuse, stack: ms.StackInuse, live: ms.HeapAlloc}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				f := strings.Fields(l)
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				m.rss = kb << 10
			}
		}
	}
	return m
}

// BenchmarkTunnelMemory1000 reports the proxy's heap+stack and RSS cost of
// 1000 open (idle, after one echo) CONNECT tunnels: the same 1000 clients
// and echo connections are first measured without the proxy, and the
// difference is the proxy's share.
func BenchmarkTunnelMemory1000(b *testing.B) {
	const N = 1000
	raiseNofile(b, 4*N+512)
	echo := startEcho(b, "127.0.0.2")
	tp := startProxy(b, Config{Policy: basicPolicy(echo.port), Log: func(Decision) {}})
	open := func(viaProxy bool) []net.Conn {
		conns := make([]net.Conn, N)
		for i := range conns {
			var c net.Conn
			var err error
			if viaProxy {
				c, err = openTunnel(tp.addr, "api.allowed.test:"+itoa(echo.port), i)
			} else {
				c, err = net.Dial("tcp", "127.0.0.2:"+itoa(echo.port))
				if err == nil {
					err = echoRound(c, i)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
		}
		return conns
	}
	closeAll := func(cs []net.Conn) {
		for _, c := range cs {
			c.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	var heapPer, rssPer float64
	for i := 0; i < b.N; i++ {
		m0 := memNow()
		direct := open(false)
		m1 := memNow()
		closeAll(direct)
		m2 := memNow()
		proxied := open(true)
		m3 := memNow()
		closeAll(proxied)
		heapPer = (float64(m3.heap) - float64(m2.heap) - float64(m1.heap) + float64(m0.heap)) / N
		rssPer = (float64(m3.rss) - float64(m2.rss) - float64(m1.rss) + float64(m0.rss)) / N
	}
	b.ReportMetric(heapPer/1024, "proxy-heap-KiB/tunnel")
	b.ReportMetric(rssPer/1024, "proxy-RSS-KiB/tunnel")
	b.ReportMetric(heapPer*N/(1<<20), "proxy-heap-MiB/1000")
}
