//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/corral-sandbox/corral/internal/relay"
)

// TestRelayCLI runs the built binary as `corral __relay` under a host-side
// relay.Client over real pipes: the main command (python3's http.server,
// when the host has python3) is waited for and served an HTTP request
// through DialPort; an exec's descriptors are its own pipes, not the
// channel, and the relay's own fds 0 and 1 are /dev/null; the host's
// Close (EOF) ends the relay with 0 and kills what it ran.
func TestRelayCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds corral (-short)")
	}
	bin := buildCorral(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	channel := map[string]bool{}
	for _, f := range []*os.File{inR, outR} {
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		channel[fmt.Sprintf("pipe:[%d]", st.Ino)] = true
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, relayArg)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := relay.Open(outR, inW)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PID() != cmd.Process.Pid {
		t.Errorf("hello's pid %d, want %d", c.PID(), cmd.Process.Pid)
	}
	for _, fd := range []string{"0", "1"} {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", c.PID(), fd)); l != os.DevNull {
			t.Errorf("the relay's fd %s is %q, want %s", fd, l, os.DevNull)
		}
	}

	if py, err := exec.LookPath("python3"); err != nil {
		t.Log("no python3: the main command's port wait is not exercised here")
	} else {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello through the relay"), 0o644); err != nil {
			t.Fatal(err)
		}
		port := loopbackPort(t)
		main := relay.Command{Args: []string{py, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}, Dir: dir, WaitPort: port}
		if _, err := c.Start(ctx, main); err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.DialPort(ctx, port)
		}}}
		resp, err := hc.Get("http://sandbox/hello.txt")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello through the relay" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
	}

	var out strings.Builder
	code, sig, err := c.Exec(ctx, relay.Command{Args: []string{"/bin/sh", "-c", `for f in /proc/self/fd/*; do echo "$f $(readlink $f)"; done; exit 5`}, Stdout: &out})
	if err != nil || code != 5 || sig != "" {
		t.Fatalf("Exec: %d %q %v", code, sig, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if f := strings.Fields(line); len(f) == 2 && channel[f[1]] {
			t.Errorf("the exec holds the relay's channel: %s", line)
		}
	}
	if !strings.Contains(out.String(), "/proc/self/fd/1 pipe:") {
		t.Errorf("the exec's fd 1 is not a pipe:\n%s", out.String())
	}

	// What an exec puts in a session or process group of its own, while
	// the exec still runs, is killed too (the relay is their subreaper).
	escape := fmt.Sprintf("%d", 4000000+os.Getpid()%100000)
	if _, err := c.StartExec(ctx, relay.Command{Args: []string{"/bin/sh", "-c", "setsid sleep " + escape + " & " +
		"python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(" + escape + ")' & exec sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	if _, err := c.StartExec(ctx, relay.Command{Args: []string{"/bin/sh", "-c", "echo $$; exec sleep 1000"}, Stdout: pw}); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(pr).ReadString('\n')
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	go io.Copy(io.Discard, pr)
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("corral __relay after the host's EOF: %v\n%s", err, stderr.String())
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("the exec (pid %d) outlived the relay: kill 0 says %v", pid, err)
	}
	if left := procsWith(escape); len(left) > 0 {
		t.Errorf("processes an exec moved to a session or group of their own outlived the relay: %v", left)
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// procsWith are the pids of the processes whose command line has s.
func procsWith(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), s) {
			out = append(out, pid)
		}
	}
	return out
}

// TestRelayNotDumpable: the relay, run as another uid than the host, is
// not dumpable: its /proc entries are root's, so a workload process of
// its uid can neither open /proc/RELAY/fd/* (the channel) nor ptrace it.
func TestRelayNotDumpable(t *testing.T) {
	if testing.Short() || os.Getuid() != 0 {
		t.Skip("needs root to run the relay as another uid, and builds corral")
	}
	bin := buildCorral(t)
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin))} { // t.TempDir's are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, relayArg)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 54321, Gid: 54321}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := relay.Open(out, in)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/fd", c.PID()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 {
		t.Errorf("/proc/%d/fd is uid %d's: the relay is dumpable, so its uid's processes can reopen the channel", c.PID(), st.Uid)
	}
	c.Close()
	_ = cmd.Wait()
}

// TestRelayRefusesTerminal: `corral __relay` is not for people.
func TestRelayRefusesTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds corral (-short)")
	}
	bin := buildCorral(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skip("no pty:", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	var stderr strings.Builder
	cmd := exec.Command(bin, relayArg)
	cmd.Stdin, cmd.Stderr = tty, &stderr
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("corral __relay on a terminal: %v, want exit 2", err)
	}
	if !strings.Contains(stderr.String(), "not for use at a terminal") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

func buildCorral(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "corral")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// loopbackPort is a loopback port nobody listens on (as of now).
func loopbackPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
