package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pipeName is what /proc/PID/fd/N links to for f: "pipe:[inode]".
func pipeName(t *testing.T, f *os.File) string {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("pipe:[%d]", st.Ino)
}

// TestChildrenGetOwnStdio: an exec's and the main command's descriptors
// are pipes of their own, never the relay's channel.
func TestChildrenGetOwnStdio(t *testing.T) {
	p := newPair(t)
	channel := map[string]bool{pipeName(t, p.relayIn): true, pipeName(t, p.relayOut): true}
	check := func(who, listing string) {
		t.Helper()
		fds := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
			fd, target, _ := strings.Cut(line, " ")
			fds[fd] = target
			if channel[target] {
				t.Errorf("%s: fd %s is the relay's channel %s", who, fd, target)
			}
		}
		for _, fd := range []string{"1", "2"} {
			if !strings.HasPrefix(fds[fd], "pipe:") {
				t.Errorf("%s: fd %s is %q, want a pipe", who, fd, fds[fd])
			}
		}
	}
	var out strings.Builder
	cmd := helperCmd("fds")
	cmd.Stdin, cmd.Stdout = strings.NewReader(""), &out
	if _, _, err := p.c.Exec(ctxT(t), cmd); err != nil {
		t.Fatal(err)
	}
	check("exec", out.String())
	out.Reset()
	cmd = helperCmd("fds")
	cmd.Stdout = &out
	main, err := p.c.Start(ctxT(t), cmd)
	if err != nil {
		t.Fatal(err)
	}
	main.Exit()
	check("main", out.String())
}

// alive: pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// TestSignals: a signal reaches the process and its exit names it; an
// unknown signal is reported; a cancelled Exec kills its process.
func TestSignals(t *testing.T) {
	p := newPair(t)
	proc, err := p.c.StartExec(ctxT(t), helperCmd("sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal("NOSUCH"); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal("term"); err != nil {
		t.Fatal(err)
	}
	e, err := proc.Exit()
	if err != nil || e.Code != -1 || e.Signal != "SIGTERM" {
		t.Fatalf("exit %+v %v, want SIGTERM", e, err)
	}
	mustContain(t, "faults", fmt.Sprint(p.c.Faults()), `unknown signal "NOSUCH"`)
	if err := proc.Signal("TERM"); err == nil {
		t.Fatal("Signal of an ended process: no error")
	}

	ctx, cancel := context.WithCancel(ctxT(t))
	r, w := io.Pipe()
	cmd := helperCmd("sleep")
	cmd.Stdout = w
	res := make(chan error, 1)
	go func() { _, _, err := p.c.Exec(ctx, cmd); res <- err }()
	line, _ := bufio.NewReader(r).ReadString('\n')
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Exec: %v", err)
	}
	go io.Copy(io.Discard, r)
	for alive(pid) { // the relay kills it; the test's timeout bounds this
		time.Sleep(10 * time.Millisecond)
	}
}
