// Package mountinfo reads fields of /proc/PID/mountinfo (proc(5)).
package mountinfo

import (
	"os"
	"strconv"
	"strings"
)

// Unescape undoes the octal escaping mountinfo applies to its path fields
// (\040 for a space, \011 tab, \012 newline, \134 backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Entry is one line of a mountinfo file (the fields Corral uses).
type Entry struct {
	Dev     string // major:minor of the filesystem
	Root    string // the mount's root within its filesystem
	Point   string // the mount point
	Options string // per-mount options ("ro,nosuid,...")
}

// Read parses a mountinfo file, e.g. /proc/self/mountinfo or
// /proc/PID/mountinfo; lines too short to be entries are skipped.
func Read(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		out = append(out, Entry{Dev: f[2], Root: Unescape(f[3]), Point: Unescape(f[4]), Options: f[5]})
	}
	return out, nil
}
