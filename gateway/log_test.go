//go:build linux

package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The log keeps at most MaxLog bytes plus one note saying so; later output
// is dropped.
func TestLogCap(t *testing.T) {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "x.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := 0; i < MaxLog>>20; i++ {
		logWrite(f, chunk)
	}
	logWrite(f, []byte("one byte too many"))
	logWrite(f, []byte("and more"))
	fi, _ := f.Stat()
	b, _ := os.ReadFile(f.Name())
	tail := string(b[MaxLog:])
	if fi.Size() <= MaxLog || !strings.Contains(tail, "the log is full") || strings.Contains(tail, "more") {
		t.Errorf("size %d, after the cap %q", fi.Size(), tail)
	}
}
