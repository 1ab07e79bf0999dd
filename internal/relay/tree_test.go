package relay

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// treePIDs reads n pids, one per line, from r (the sleep helper's).
func treePIDs(t *testing.T, r io.Reader, n int) []int {
	t.Helper()
	br := bufio.NewReader(r)
	var pids []int
	for range n {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(line))
		pids = append(pids, pid)
	}
	go io.Copy(io.Discard, br)
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("pid %d is not running", pid)
		}
	}
	return pids
}

// gone waits up to 10 s for each of pids to end and fails t for any that
// does not, saying after what.
func gone(t *testing.T, pids []int, after string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d outlived %s", pid, after)
		}
	}
}

// TestKillReachesChildren: a kill of an exec ends what it started too
// (its process group on Linux, its job on Windows), while the relay and
// the main command run on.
func TestKillReachesChildren(t *testing.T) {
	p := newPair(t)
	r, w := io.Pipe()
	cmd := helperCmd("sleep", "tree")
	cmd.Stdout = w
	proc, err := p.c.StartExec(ctxT(t), cmd)
	if err != nil {
		t.Fatal(err)
	}
	pids := treePIDs(t, r, 2)
	if err := proc.Signal("KILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Exit(); err != nil {
		t.Fatal(err)
	}
	gone(t, pids, "the exec's kill")
}

// TestEOFKillsChildren: when the host goes (the relay's stdin reaches
// EOF) the relay kills what it started, the process's children too.
func TestEOFKillsChildren(t *testing.T) {
	p := newPair(t)
	r, w := io.Pipe()
	cmd := helperCmd("sleep", "tree")
	cmd.Stdout = w
	if _, err := p.c.StartExec(ctxT(t), cmd); err != nil {
		t.Fatal(err)
	}
	main := helperCmd("sleep")
	main.Stdout = w
	if _, err := p.c.Start(ctxT(t), main); err != nil {
		t.Fatal(err)
	}
	pids := treePIDs(t, r, 3)
	p.c.Close()
	if err := <-p.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	p.served <- nil // for the cleanup
	// Serve has reaped its children; the grandchild is init's to reap
	// (Linux) or ended with its job (Windows).
	gone(t, pids, "the relay's EOF")
}
