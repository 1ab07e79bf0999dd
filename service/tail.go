//go:build linux

package service

import (
	"context"
	"errors"
	"io"
	"os"
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
