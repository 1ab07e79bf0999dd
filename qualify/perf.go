//go:build linux

package qualify

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Perf is a provider's performance section. Times are medians over Runs
// repetitions unless named otherwise; the sandboxed commands run on
// Env.SystemPolicy("") with the workdir read-write.
type Perf struct {
	Runs int `json:"runs"`
	// ColdStart is the first `corral run -- true` of this qualify run
	// (nothing is dropped from the page cache first); WarmStart the median
	// of the Runs after it.
	ColdStart time.Duration `json:"cold_start_ns"`
	WarmStart time.Duration `json:"warm_start_ns"`
	// PeakRSSKiB is the largest peak resident set of any one process of a
	// `corral run -- true` tree (GNU time's %M over 3 runs); 0 when
	// /usr/bin/time is missing. Not the rusage of our own child: Go starts
	// it with vfork, and the kernel then counts this (large) qualify
	// process's peak as the child's.
	PeakRSSKiB int64 `json:"peak_rss_kib"`
	// CPU is the median user+system CPU time of one `corral run -- true`,
	// its reaped children included.
	CPU   time.Duration `json:"cpu_ns"`
	Tools []ToolPerf    `json:"tools"`
	Error string        `json:"error,omitempty"` // why the start measurements are missing
}

// ToolPerf is one typical tool command, through corral and on the host.
type ToolPerf struct {
	Name    string        `json:"name"`
	Command string        `json:"command"`
	Sandbox time.Duration `json:"sandbox_ns"` // median wall time through `corral run`
	Host    time.Duration `json:"host_ns"`    // median wall time run directly
	Ratio   float64       `json:"ratio"`      // Sandbox / Host
	Skipped string        `json:"skipped,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// perf measures provider's performance section.
func (rs *runState) perf(ctx context.Context, provider string) *Perf {
	p := &Perf{Runs: rs.opts.PerfRuns, Tools: []ToolPerf{}}
	e, err := rs.newEnv(provider, "perf")
	if err != nil {
		p.Error = err.Error()
		return p
	}
	defer e.cleanup()
	pol := e.SystemPolicy("")
	wd := e.TempDir("work")

	// Starts: `corral run -- true`.
	var warm, cpu []time.Duration
	for i := 0; i <= p.Runs && ctx.Err() == nil; i++ {
		m, err := e.timed(ctx, Run{Policy: pol, Workdir: wd, Args: []string{"true"}})
		if err != nil {
			p.Error = err.Error()
			break
		}
		if i == 0 {
			p.ColdStart = m.wall
		} else {
			warm = append(warm, m.wall)
		}
		cpu = append(cpu, m.cpu)
	}
	p.WarmStart, p.CPU = median(warm), median(cpu)
	p.PeakRSSKiB = e.peakRSS(ctx, Run{Policy: pol, Workdir: wd, Args: []string{"true"}})

	// Tools.
	repo := e.TempDir("repo")
	tree := e.TempDir("tree")
	prepErr := prepRepo(ctx, e, repo)
	if prepErr == nil {
		prepErr = prepTree(tree)
	}
	tools := []struct {
		name, dir string
		args      []string
		needs     string
	}{
		{"git status", repo, []string{"git", "status", "--short"}, "git"},
		{"python3 -c pass", wd, []string{"python3", "-c", "pass"}, "python3"},
		{"sh -c 'ls -R' (500 files)", tree, []string{"sh", "-c", "ls -R . >/dev/null"}, "sh"},
	}
	for _, t := range tools {
		tp := ToolPerf{Name: t.name, Command: shellJoin(t.args)}
		if _, err := lookHostPath(t.needs); err != nil {
			tp.Skipped = t.needs + " is not installed on the host"
		} else if prepErr != nil {
			tp.Error = "preparing the repo and tree: " + prepErr.Error()
		} else {
			tp.Sandbox, tp.Host, err = e.compare(ctx, p.Runs, pol, t.dir, t.args)
			if err != nil {
				tp.Error = err.Error()
			} else if tp.Host > 0 {
				tp.Ratio = float64(tp.Sandbox) / float64(tp.Host)
			}
		}
		p.Tools = append(p.Tools, tp)
	}
	return p
}

// peakRSS runs r three times under GNU time (which forks, so the count is
// the tree's own) and returns the largest %M in KiB, or 0.
//
// LinuxGateway: 0, since the sandbox's processes are the gateway's
// supervisor's, not a child of the `corral sandbox exec` client.
func (e *Env) peakRSS(ctx context.Context, r Run) int64 {
	tp, err := exec.LookPath("/usr/bin/time")
	if err != nil || e.Provider == LinuxGateway {
		return 0
	}
	var peak int64
	for i := 0; i < 3 && ctx.Err() == nil; i++ {
		f := filepath.Join(e.Dir, fmt.Sprintf("rss-%d", i))
		cmd := e.Command(ctx, r)
		cmd.Args = append([]string{tp, "-f", "%M", "-o", f}, cmd.Args...)
		cmd.Path = tp
		if err := cmd.Run(); err != nil {
			continue
		}
		b, _ := os.ReadFile(f)
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			peak = max(peak, n)
		}
	}
	return peak
}

// measurement is one timed command.
type measurement struct {
	wall, cpu time.Duration
}

// timed runs r through corral and measures it; a non-zero exit is an error.
// LinuxGateway: the `corral sandbox exec` in a sandbox made for it (the
// create and delete around it are not counted), and the client's CPU.
func (e *Env) timed(ctx context.Context, r Run) (measurement, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if e.Provider == LinuxGateway {
		run, err := e.Start(ctx, r)
		if err != nil {
			return measurement{}, err
		}
		o, err := run.Wait()
		m := measurement{wall: o.Elapsed}
		if ps := run.Cmd.ProcessState; ps != nil {
			m.cpu = ps.UserTime() + ps.SystemTime()
		}
		if err == nil && o.Code != 0 {
			err = fmt.Errorf("exit %d: %s", o.Code, bound(strings.TrimSpace(o.Stdout+o.Stderr), 500))
		}
		if err != nil {
			return m, fmt.Errorf("corral sandbox exec -- %s: %v", strings.Join(r.Args, " "), err)
		}
		return m, nil
	}
	cmd := e.Command(ctx, r)
	return measure(cmd, "corral run -- "+strings.Join(r.Args, " "))
}

func measure(cmd *exec.Cmd, what string) (measurement, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	m := measurement{wall: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		m.cpu = ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		return m, fmt.Errorf("%s: %v: %s", what, err, bound(strings.TrimSpace(out.String()), 500))
	}
	return m, nil
}

// compare runs args n times through corral (workdir dir) and n times
// directly in dir, alternating, and returns the medians.
func (e *Env) compare(ctx context.Context, n int, pol, dir string, args []string) (sandbox, host time.Duration, err error) {
	var sb, hs []time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		m, err := e.timed(ctx, Run{Policy: pol, Workdir: dir, Args: args})
		if err != nil {
			return 0, 0, err
		}
		sb = append(sb, m.wall)
		// Resolve in the PATH the command gets, not in this process's.
		path, err := lookHostPath(args[0])
		if err != nil {
			return 0, 0, fmt.Errorf("host: %s: %v", args[0], err)
		}
		hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		cmd := exec.CommandContext(hctx, path, args[1:]...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + hostPath, "HOME=" + e.Home, "LANG=C"}
		e.asUser(cmd) // the same user as the sandbox's, in the tree handed to it
		m, err = measure(cmd, "host: "+strings.Join(args, " "))
		cancel()
		if err != nil {
			return 0, 0, err
		}
		hs = append(hs, m.wall)
	}
	return median(sb), median(hs), ctx.Err()
}

func lookHostPath(name string) (string, error) {
	for _, d := range filepath.SplitList(hostPath) {
		p := filepath.Join(d, name)
		if s, err := os.Stat(p); err == nil && !s.IsDir() && s.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// prepRepo makes a small git repository with one commit.
func prepRepo(ctx context.Context, e *Env, repo string) error {
	for i := range 20 {
		e.WriteFile(filepath.Join(repo, "src", fmt.Sprintf("f%02d.txt", i)), strings.Repeat("line\n", 50), 0o644)
	}
	if _, err := lookHostPath("git"); err != nil {
		return nil // the git tool is skipped
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "."},
		{"-c", "user.name=corral qualify", "-c", "user.email=qualify@corral.invalid", "commit", "-q", "-m", "init"},
	} {
		git, _ := lookHostPath("git")
		cmd := exec.CommandContext(ctx, git, args...)
		cmd.Dir = repo
		cmd.Env = []string{"PATH=" + hostPath, "HOME=" + e.Home, "LANG=C"}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", args[0], err, out)
		}
	}
	// One modified file, so that status has something to say.
	e.WriteFile(filepath.Join(repo, "src", "f00.txt"), "changed\n", 0o644)
	return nil
}

// prepTree makes 20 directories of 25 files.
func prepTree(dir string) error {
	for d := range 20 {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return err
		}
		for f := range 25 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("file%02d.txt", f)), []byte("x\n"), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func (p *Perf) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "Medians over %d runs. Cold start is the first run of this qualify run (no cache dropped).\n\n", p.Runs)
	if p.Error != "" {
		fmt.Fprintf(b, "Error: %s\n\n", mdCell(p.Error))
	}
	fmt.Fprintf(b, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(b, "| cold start `corral run -- true` | %s |\n", ms(p.ColdStart))
	fmt.Fprintf(b, "| warm start (median) | %s |\n", ms(p.WarmStart))
	fmt.Fprintf(b, "| peak RSS, largest process of the tree (GNU time %%M) | %d KiB |\n", p.PeakRSSKiB)
	fmt.Fprintf(b, "| CPU time user+sys (median) | %s |\n", ms(p.CPU))
	fmt.Fprintf(b, "\n| tool | through corral | on the host | ratio | note |\n|---|---|---|---|---|\n")
	for _, t := range p.Tools {
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", mdCell(t.Command), ms(t.Sandbox), ms(t.Host), ratio(t.Ratio), mdCell(t.Skipped+t.Error))
	}
}

func ratio(r float64) string {
	if r == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

// shellJoin quotes args for display as a shell command line.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
