//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Tail copies path to w; with follow it keeps copying what is appended,
// reopening the file when it is rotated (a new inode at path), until ctx
// ends. A missing file is empty.
func Tail(ctx context.Context, path string, w io.Writer, follow bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var f *os.File
	open := func() {
		if nf, err := os.Open(path); err == nil {
			f = nf
		}
	}
	open()
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		if f != nil {
			if _, err := io.Copy(w, f); err != nil {
				return err
			}
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
		cur, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if f == nil {
			open()
			continue
		}
		if old, err := f.Stat(); err == nil && !os.SameFile(old, cur) {
			_, _ = io.Copy(w, f) // the rest of the rotated file
			f.Close()
			f = nil
			open()
		}
	}
}

// Printable returns s with every control character but newline and tab
// (escape sequences among them: a workload's output must not drive the
// operator's terminal) written as \xNN, and invalid UTF-8 as \ufffd.
func Printable(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\ufffd") {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			fmt.Fprintf(&b, `\x%02x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// PrintableWriter passes what is written through Printable (for output to
// a terminal). Writes are per chunk: a multi-byte character split across
// two writes shows as \ufffd.
type PrintableWriter struct{ W io.Writer }

func (p PrintableWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.W, Printable(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}
