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
	ID      int    // the mount's id (unique on the host; fdinfo's mnt_id, statx's stx_mnt_id)
	Parent  int    // the parent mount's id
	Dev     string // major:minor of the filesystem
	Root    string // the mount's root within its filesystem
	Point   string // the mount point
	Options string // per-mount options ("ro,nosuid,...")
	// Optional are the optional fields up to the "-" separator:
	// "shared:N", "master:N", "propagate_from:N", "unbindable".
	Optional []string
}

// ReadOnly reports whether the mount's per-mount options hold "ro".
func (e Entry) ReadOnly() bool {
	for _, o := range strings.Split(e.Options, ",") {
		if o == "ro" {
			return true
		}
	}
	return false
}

// Master is N of the entry's "master:N" field (the peer group it
// receives propagation from, mount_namespaces(7)), 0 if it is no slave.
func (e Entry) Master() int {
	for _, o := range e.Optional {
		if v, ok := strings.CutPrefix(o, "master:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// Subtree is the ids of the mount id and of every mount below it
// (its children, theirs, ...) in es, id first; none when id is not there.
func Subtree(es []Entry, id int) []int {
	have := false
	for _, e := range es {
		have = have || e.ID == id
	}
	if !have {
		return nil
	}
	out := []int{id}
	in := map[int]bool{id: true}
	for grew := true; grew; {
		grew = false
		for _, e := range es {
			if in[e.Parent] && !in[e.ID] {
				in[e.ID] = true
				out = append(out, e.ID)
				grew = true
			}
		}
	}
	return out
}

// Read parses a mountinfo file, e.g. /proc/self/mountinfo or
// /proc/PID/mountinfo; lines too short to be entries are skipped.
func Read(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(string(data)), nil
}

// Parse parses the text of a mountinfo file (proc(5): "ID PARENT
// MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER");
// lines too short to be entries are skipped.
func Parse(data string) []Entry {
	var out []Entry
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		e := Entry{Dev: f[2], Root: Unescape(f[3]), Point: Unescape(f[4]), Options: f[5]}
		e.ID, _ = strconv.Atoi(f[0])
		e.Parent, _ = strconv.Atoi(f[1])
		for _, o := range f[6:] {
			if o == "-" {
				break
			}
			e.Optional = append(e.Optional, o)
		}
		out = append(out, e)
	}
	return out
}
