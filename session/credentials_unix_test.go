//go:build unix

package session

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCredentialFileFIFO: a FIFO as a source file is refused, not opened
// (which would block the start until someone writes to it).
func TestCredentialFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := credPolicy(t, t.TempDir(), `{file: `+fifo+`}`)
	if _, _, err := loadCredentials(context.Background(), r, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("fifo: %v", err)
	}
}
