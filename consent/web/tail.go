package web

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// TailWindow is how much of the end of a file TailFile reads at most
// (bytes): 256 KiB, so a large audit log costs the page no more.
const TailWindow = 256 << 10

// TailFile is the last n (at most) whole lines of the file at path,
// oldest first, without their newlines: what an AuditSource's AuditTail
// returns for an audit log kept as JSON lines (the gateway's
// ID.audit.jsonl). Only the last TailWindow bytes are read; the first
// line of that window is dropped as partial unless the window starts the
// file, and so is a last line without its newline (being written). A
// path that is not a regular file (a link, a fifo) is an error; a missing
// one is no lines.
func TailFile(path string, n int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|oNoFollow|oNonBlock, 0)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	off := max(fi.Size()-TailWindow, 0)
	buf := make([]byte, fi.Size()-off)
	k, err := f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return nil, err
	}
	buf = buf[:k]
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i]
	} else {
		return nil, nil // no whole line
	}
	lines := strings.Split(string(buf), "\n")
	if off > 0 {
		lines = lines[1:]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}
