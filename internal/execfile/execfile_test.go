//go:build linux

package execfile

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// TestCopyRunsUnderForks: a copy is run at once while other goroutines
// of this process start processes, as qualify's copy is in the e2e suite
// (where 11 of 300 failed with ETXTBSY before Copy held the fork lock).
func TestCopyRunsUnderForks(t *testing.T) {
	src, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true on PATH")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = exec.Command(src).Run()
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	dir := t.TempDir()
	busy := 0
	for i := range 300 {
		dst := filepath.Join(dir, fmt.Sprint(i))
		if err := Copy(src, dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := exec.Command(dst).Run(); errors.Is(err, syscall.ETXTBSY) {
			busy++
		} else if err != nil {
			t.Fatalf("run the copy: %v", err)
		}
	}
	if busy > 0 {
		t.Fatalf("%d of 300 copies could not be run at once: text file busy", busy)
	}
}
