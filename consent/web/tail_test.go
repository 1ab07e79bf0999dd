//go:build unix

package web

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestTailFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	small := write("small", "a\nb\nc\npartial")
	for n, want := range map[int][]string{0: nil, 2: {"b", "c"}, 3: {"a", "b", "c"}, 9: {"a", "b", "c"}} {
		if got, err := TailFile(small, n); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("TailFile(small, %d) = %q, %v; want %q", n, got, err, want)
		}
	}
	// Beyond the window: the cut first line is dropped, the last ones kept.
	big := strings.Repeat("x", TailWindow) + "\nfirst whole\nlast\n"
	if got, err := TailFile(write("big", big), 5); err != nil || !reflect.DeepEqual(got, []string{"first whole", "last"}) {
		t.Errorf("TailFile(big) = %q, %v", got, err)
	}
	if got, err := TailFile(filepath.Join(dir, "absent"), 3); err != nil || got != nil {
		t.Errorf("absent: %q, %v; want none", got, err)
	}
	if got, err := TailFile(write("none", "no newline"), 3); err != nil || got != nil {
		t.Errorf("no whole line: %q, %v; want none", got, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	if _, err := TailFile(link, 3); err == nil {
		t.Error("a symlink was followed")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TailFile(fifo, 3); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a fifo: %v, want not a regular file", err)
	}
}
