// Package bench holds Corral's start-up benchmarks. It has no tests: plain
// `go test ./...` builds nothing and runs nothing here. Run the benchmarks with
//
//	go test -run '^$' -bench . ./bench
//
// startup.sh in this directory is the fuller comparison (median, p90, mean,
// peak RSS, and a results file).
package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildDir  string
	corralBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// corral builds the corral binary once per test process (as the product is
// shipped: CGO_ENABLED=0) and returns its path.
func corral(b *testing.B) string {
	b.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "corral-bench-")
		if buildErr != nil {
			return
		}
		corralBin = filepath.Join(buildDir, "corral")
		cmd := exec.Command("go", "build", "-o", corralBin, "github.com/corral-sandbox/corral/cmd/corral")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return corralBin
}

// freshDir makes an empty directory for one run; the caller stops the timer.
func freshDir(b *testing.B, parent string, i int) string {
	d := filepath.Join(parent, fmt.Sprintf("wd%d", i))
	if err := os.Mkdir(d, 0o755); err != nil {
		b.Fatal(err)
	}
	return d
}

// runOnce runs argv in dir. (No RSS is reported here: os/exec starts the
// child with CLONE_VM, so its ru_maxrss counts this test binary's own RSS
// from before the exec; startup.sh measures memory instead.)
func runOnce(dir string, argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %w\n%s", argv, err, out.Bytes())
	}
	return nil
}

func bench(b *testing.B, argv []string) {
	parent := b.TempDir()
	i := 0
	for b.Loop() {
		b.StopTimer()
		dir := freshDir(b, parent, i)
		i++
		b.StartTimer()
		if err := runOnce(dir, argv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTrue times `corral run -- true` with the built-in default
// policy, from a fresh empty working directory each time.
func BenchmarkRunTrue(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("the linux provider is the only one")
	}
	bin := corral(b)
	argv := []string{bin, "run", "--", "true"}
	// One probe run: a machine where Corral cannot sandbox at all (exit
	// 121, unavailable) is skipped, any other failure is fatal.
	if err := runOnce(b.TempDir(), argv); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 121 {
			b.Skipf("corral is unavailable here: %v", err)
		}
		b.Fatal(err)
	}
	bench(b, argv)
}

// BenchmarkBwrapTrue times the bubblewrap equivalent, for comparison.
func BenchmarkBwrapTrue(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("bwrap is not installed (apt-get install bubblewrap): ", err)
	}
	argv := []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"}
	if err := runOnce(b.TempDir(), argv); err != nil {
		b.Skipf("bwrap cannot run here: %v", err)
	}
	bench(b, argv)
}

// BenchmarkTrue is the baseline: fork and exec of true alone.
func BenchmarkTrue(b *testing.B) {
	t, err := exec.LookPath("true")
	if err != nil {
		b.Skip("true is not in PATH")
	}
	bench(b, []string{t})
}
