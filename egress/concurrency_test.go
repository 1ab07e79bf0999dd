//go:build linux

package egress

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

const connectOK = "HTTP/1.1 200 Connection established\r\n\r\n"

func raiseNofile(t testing.TB, want uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	if rl.Cur < want {
		rl.Cur = min(want, rl.Max)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	if rl.Cur < want {
		t.Skipf("RLIMIT_NOFILE %d < %d", rl.Cur, want)
	}
}

func countFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

// openTunnel CONNECTs through the proxy and checks one echo round.
func openTunnel(proxyAddr, target string, i int) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxyAddr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	b := make([]byte, len(connectOK))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != connectOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT reply %q %v", b, err)
	}
	if err := echoRound(c, i); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func echoRound(c net.Conn, i int) error {
	msg := fmt.Sprintf("tunnel %d says hello %d", i, time.Now().UnixNano())
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo %q != %q", got, msg)
	}
	return nil
}

// Test1000ConcurrentTunnels opens 1000 simultaneous CONNECT tunnels that all
// echo, closes the proxy with them open, and checks that every goroutine and
// file descriptor is released.
func Test1000ConcurrentTunnels(t *testing.T) {
	const N = 1000
	raiseNofile(t, 4*N+512)
	echo := startEcho(t, "127.0.0.2")
	runtime.GC()
	baseG := runtime.NumGoroutine()
	baseFD := countFDs(t)

	p, err := New(Config{Policy: basicPolicy(echo.port)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	target := "api.allowed.test:" + itoa(echo.port)

	conns := make([]net.Conn, N)
	errs := make(chan error, N)
	sem := make(chan struct{}, 128) // bounded dialing
	var wg sync.WaitGroup
	for i := 0; i < N; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := openTunnel(l.Addr().String(), target, i)
			if err != nil {
				errs <- fmt.Errorf("tunnel %d: %w", i, err)
				return
			}
			conns[i] = c
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// All 1000 are open at once: a second round on every one, concurrently.
	errs = make(chan error, N)
	for i, c := range conns {
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			if err := echoRound(c, i); err != nil {
				errs <- err
			}
		}(i, c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("1000 tunnels open: %d goroutines, %d fds", runtime.NumGoroutine(), countFDs(t))

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("tunnel still open after Close")
		}
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, fds := runtime.NumGoroutine(), countFDs(t)
		if g <= baseG && fds <= baseFD {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("leak: goroutines %d (baseline %d), fds %d (baseline %d)\n%s", g, baseG, fds, baseFD, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
