package probe

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"os/signal"
	"syscall"
)

// visiblePids lists the numeric entries of /proc, sorted.
func visiblePids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	sort.Ints(pids)
	return pids, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}

// pidsResult is the "pids" Result: the pids visible in /proc.
func pidsResult() (Result, []int) {
	pids, err := visiblePids()
	r := result("pids", err)
	if err == nil {
		r.Detail = joinInts(pids)
	}
	return r, pids
}

// probeEnv reports this process's environment, then the environ and cmdline
// of every pid visible in /proc, then the list of those pids.
func probeEnv(args []string) ([]Result, error) {
	if len(args) != 0 {
		return nil, usagef("usage: env")
	}
	var rs []Result
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		rs = append(rs, Result{What: "env", OK: true, Detail: kv})
	}
	pr, pids := pidsResult()
	for _, pid := range pids {
		for _, f := range []string{"environ", "cmdline"} {
			p := fmt.Sprintf("/proc/%d/%s", pid, f)
			s, err := readBounded(p)
			r := result("read "+p, err)
			if err == nil {
				r.Detail = nulToSpace(s)
			}
			rs = append(rs, r)
		}
	}
	return append(rs, pr), nil
}

// probeSleep sleeps SECONDS; MARKER only tags the command line so that the
// host can find the process. A third argument "ignore" makes it ignore
// SIGHUP, SIGINT and SIGTERM first (the nohup-style survivor of `spawn`).
func probeSleep(args []string) ([]Result, error) {
	if len(args) < 1 || len(args) > 3 {
		return nil, usagef("usage: sleep SECONDS [MARKER [ignore]]")
	}
	sec, err := strconv.ParseFloat(args[0], 64)
	if err != nil || sec < 0 {
		return nil, usagef("bad SECONDS %q", args[0])
	}
	if len(args) == 3 {
		if args[2] != "ignore" {
			return nil, usagef("third argument must be \"ignore\"")
		}
		signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	}
	time.Sleep(time.Duration(sec * float64(time.Second)))
	return []Result{{What: "sleep " + args[0], OK: true, Detail: fmt.Sprintf("pid %d", os.Getpid())}}, nil
}

// allocSink keeps the allocation alive until the report.
var allocSink [][]byte

// probeAlloc allocates and touches MB MiB, printing progress to stderr. The
// process may be killed by an OOM killer before it reports.
func probeAlloc(args []string) ([]Result, error) {
	if len(args) != 1 {
		return nil, usagef("usage: alloc MB")
	}
	mb, err := strconv.Atoi(args[0])
	if err != nil || mb < 0 {
		return nil, usagef("bad MB %q", args[0])
	}
	allocSink = nil
	for i := 0; i < mb; i++ {
		c := make([]byte, 1<<20)
		for j := 0; j < len(c); j += 4096 {
			c[j] = 1
		}
		allocSink = append(allocSink, c)
		if (i+1)%16 == 0 {
			fmt.Fprintf(os.Stderr, "alloc: %d MiB\n", i+1)
		}
	}
	got := len(allocSink)
	allocSink = nil
	return []Result{{What: "alloc " + args[0] + " MiB", OK: got == mb, Detail: fmt.Sprintf("%d MiB allocated and touched", got)}}, nil
}

// probeBusy runs N goroutines (with GOMAXPROCS raised to at least N) that
// spin for SECONDS.
func probeBusy(args []string) ([]Result, error) {
	if len(args) != 2 {
		return nil, usagef("usage: busy N SECONDS")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > 4096 {
		return nil, usagef("bad N %q", args[0])
	}
	sec, err := strconv.ParseFloat(args[1], 64)
	if err != nil || sec < 0 {
		return nil, usagef("bad SECONDS %q", args[1])
	}
	if runtime.GOMAXPROCS(0) < n {
		runtime.GOMAXPROCS(n)
	}
	start := time.Now()
	deadline := start.Add(time.Duration(sec * float64(time.Second)))
	var total atomic.Uint64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var k uint64
			for {
				for j := 0; j < 1<<16; j++ {
					k++
				}
				if time.Now().After(deadline) {
					break
				}
			}
			total.Add(k)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	return []Result{{What: fmt.Sprintf("busy %d %s", n, args[1]), OK: true,
		Detail: fmt.Sprintf("wall %.2fs, %d iterations, GOMAXPROCS %d, NumCPU %d%s", wall.Seconds(), total.Load(), runtime.GOMAXPROCS(0), runtime.NumCPU(), cpuTime())}}, nil
}
