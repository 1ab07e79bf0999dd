package headbuf

import (
	"io"
	"strings"
	"testing"
)

func TestKeepsTheHead(t *testing.T) {
	b := New(5)
	n, err := io.Copy(b, strings.NewReader("hello, world"))
	if err != nil || n != 12 {
		t.Fatalf("copy: %d %v, want all 12 bytes taken", n, err)
	}
	b.Write([]byte("!"))
	if b.String() != "hello" || b.Total() != 13 {
		t.Fatalf("kept %q of %d, want \"hello\" of 13", b.String(), b.Total())
	}
	var zero Buffer
	zero.Write([]byte("x"))
	if zero.String() != "" || zero.Total() != 1 {
		t.Fatalf("zero value kept %q of %d", zero.String(), zero.Total())
	}
}
