//go:build linux

package planted

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// benchDirs is how many directories of 100 files BenchmarkScan100k makes.
var benchDirs = 1000

// BenchmarkScan100k scans a tree of 100,000 files (1,000 directories of
// 100, ten of them repositories) in which nothing changed: the cost a run
// pays after its workload ends (never before it starts).
//
//	go test -run '^$' -bench 100k -count 6 ./internal/planted
func BenchmarkScan100k(b *testing.B) {
	if err := benchSetup(); err != nil {
		b.Fatal(err)
	}
	r, err := resolvedB(benchTree)
	if err != nil {
		b.Fatal(err)
	}
	tick()
	since := Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if fs := Scan(r, since); len(fs) != 0 {
			b.Fatalf("findings in an unchanged tree: %v", fs)
		}
	}
}

// BenchmarkWalk100k is the baseline: a bare filepath.WalkDir of the same
// tree, the least any scan of it costs.
func BenchmarkWalk100k(b *testing.B) {
	if err := benchSetup(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		_ = filepath.WalkDir(benchTree, func(string, fs.DirEntry, error) error { n++; return nil })
		if n < benchDirs*100 {
			b.Fatalf("walked %d entries", n)
		}
	}
}

// TestMain removes the benchmark's tree (made once for all its rounds:
// b.TempDir would go after the first).
func TestMain(m *testing.M) {
	code := m.Run()
	if benchTree != "" {
		os.RemoveAll(benchTree)
	}
	os.Exit(code)
}

// The tree is made once for all of the benchmark's rounds.
var (
	benchOnce sync.Once
	benchTree string
	benchErr  error
)

// benchSetup makes the tree once.
func benchSetup() error {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "planted-bench-")
		if err != nil {
			benchErr = err
			return
		}
		benchTree, benchErr = makeTree(dir, benchDirs)
	})
	return benchErr
}

// makeTree fills dir with n directories of 100 files, one in 100 a
// repository.
func makeTree(dir string, n int) (string, error) {
	w, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	for d := 0; d < n; d++ {
		sub := filepath.Join(w, fmt.Sprintf("pkg%03d", d/100), fmt.Sprintf("d%04d", d))
		if d%100 == 0 {
			if err := os.MkdirAll(filepath.Join(sub, ".git"), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(sub, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
				return "", err
			}
		}
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return "", err
		}
		for f := 0; f < 100; f++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.go", f)), nil, 0o644); err != nil {
				return "", err
			}
		}
	}
	return w, nil
}
