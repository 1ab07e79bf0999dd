// Package safetar moves a directory tree through a POSIX tar stream (pax
// format) whose reader treats it as hostile: it comes back from a
// sandbox's staging directory, which the sandboxed workload can write.
// Only regular files and directories are carried; every name must be one
// that means the same relative path on Linux and on Windows (CheckName);
// sizes and counts are bounded (Limits); extraction goes through os.Root,
// so nothing lands outside the destination.
package safetar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Defaults of Limits' zero fields.
const (
	DefaultMaxEntries    = 1 << 20
	DefaultMaxFileBytes  = 4 << 30
	DefaultMaxTotalBytes = 64 << 30
	DefaultMaxNameBytes  = 1024
	DefaultMaxDepth      = 64
)

// Limits bound what a stream may hold; a zero field takes its default.
type Limits struct {
	MaxEntries    int   // entries (files and directories)
	MaxFileBytes  int64 // bytes of one file
	MaxTotalBytes int64 // bytes of all files
	MaxNameBytes  int   // bytes of one entry's name
	MaxDepth      int   // components of one entry's name
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxEntries, DefaultMaxEntries)
	def(&l.MaxNameBytes, DefaultMaxNameBytes)
	def(&l.MaxDepth, DefaultMaxDepth)
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultMaxTotalBytes
	}
	return l
}

// Stats count what a stream held. Skipped lists what Pack left out (links,
// devices, sockets, pipes, reparse points), by relative slash path.
type Stats struct {
	Files   int      `json:"files"`
	Dirs    int      `json:"dirs"`
	Bytes   int64    `json:"bytes"`
	Skipped []string `json:"skipped,omitempty"`
}

// reserved are the Windows device names, which name a device in any
// directory and with any extension ("Naming Files, Paths, and
// Namespaces", Microsoft Learn: CON, PRN, AUX, NUL, COM0-9, LPT0-9 and the
// superscript-digit forms).
var reserved = func() map[string]bool {
	m := map[string]bool{"CON": true, "PRN": true, "AUX": true, "NUL": true}
	for _, d := range []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "¹", "²", "³"} {
		m["COM"+d], m["LPT"+d] = true, true
	}
	return m
}()

// CheckName reports why name (a tar entry's, a directory's with one
// trailing "/") is not a relative path that means the same on Linux and
// Windows, or nil. Refused: empty names, invalid UTF-8, control
// characters, backslashes, a leading "/", any ":" (drive letters, NTFS
// alternate data streams), the characters <>"|?*, empty, "." and ".."
// components, components ending in "." or " " (Windows drops them),
// Windows device names as a component's base (nul, con.txt), and names
// longer or deeper than lim allows. The Windows rules are those of
// "Naming Files, Paths, and Namespaces" (Microsoft Learn).
func CheckName(name string, lim Limits) error {
	lim = lim.withDefaults()
	bad := func(why string) error { return fmt.Errorf("safetar: entry %q: %s", name, why) }
	switch {
	case name == "":
		return bad("an empty name")
	case !utf8.ValidString(name):
		return bad("not UTF-8")
	case len(name) > lim.MaxNameBytes:
		return bad(fmt.Sprintf("a name longer than %d bytes", lim.MaxNameBytes))
	case strings.HasPrefix(name, "/"):
		return bad("an absolute name")
	}
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f:
			return bad("a control character")
		case r == '\\':
			return bad("a backslash: names are slash-separated")
		case r == ':':
			return bad(`a ":" (a drive letter or an alternate data stream on Windows)`)
		case strings.ContainsRune(`<>"|?*`, r):
			return bad(fmt.Sprintf("%q, which Windows does not allow in a name", r))
		}
	}
	parts := strings.Split(strings.TrimSuffix(name, "/"), "/")
	if len(parts) > lim.MaxDepth {
		return bad(fmt.Sprintf("deeper than %d components", lim.MaxDepth))
	}
	for _, p := range parts {
		switch {
		case p == "":
			return bad("an empty component")
		case p == "." || p == "..":
			return bad(fmt.Sprintf("a %q component", p))
		case strings.HasSuffix(p, ".") || strings.HasSuffix(p, " "):
			return bad("a component ending in a dot or a space, which Windows drops")
		}
		base, _, _ := strings.Cut(p, ".")
		if reserved[strings.ToUpper(strings.TrimRight(base, " "))] {
			return bad(fmt.Sprintf("%q is a Windows device name", p))
		}
	}
	return nil
}

// Pack writes the tree under dir to w as a tar: directories (with a
// trailing "/") and regular files, by relative slash names, permission
// bits and modification time only (owner 0, no user or group names).
// Links, devices, sockets, pipes and, on Windows, reparse points are
// neither followed nor packed: they go into Stats.Skipped. skip, when
// non-nil, leaves out an entry (and a directory's subtree) it returns true
// for. A name CheckName refuses, or a tree over lim, is an error: Pack
// never writes what Unpack would refuse. The tar is closed; w is not.
func Pack(w io.Writer, dir string, lim Limits, skip func(rel string, d fs.DirEntry) bool) (Stats, error) {
	lim = lim.withDefaults()
	var st Stats
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if full == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skip != nil && skip(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.Mode().IsDir() && !fi.Mode().IsRegular() || fi.Mode()&fs.ModeIrregular != 0 {
			st.Skipped = append(st.Skipped, rel) // WalkDir does not enter a link (or a reparse point)
			return nil
		}
		h := &tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX, Typeflag: tar.TypeReg}
		if fi.IsDir() {
			h.Name, h.Typeflag = rel+"/", tar.TypeDir
			st.Dirs++
		} else {
			h.Size = fi.Size()
			st.Files++
			st.Bytes += h.Size
		}
		if err := checkHeader(h, lim, &st); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(full)
		if err != nil {
			return err
		}
		defer f.Close()
		// Exactly the size written in the header: a file that grows
		// meanwhile is cut, one that shrinks is an error.
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("safetar: %s changed while it was packed: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, tw.Close()
}

// checkHeader applies the rules of a stream to the next header h, with
// st the counts so far including h.
func checkHeader(h *tar.Header, lim Limits, st *Stats) error {
	if err := CheckName(h.Name, lim); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
	case tar.TypeDir:
	default:
		return fmt.Errorf("safetar: entry %q: a %s: only regular files and directories are accepted", h.Name, typeName(h.Typeflag))
	}
	switch {
	case st.Files+st.Dirs > lim.MaxEntries:
		return fmt.Errorf("safetar: more than %d entries", lim.MaxEntries)
	case h.Size < 0 || (h.Typeflag == tar.TypeDir && h.Size != 0):
		return fmt.Errorf("safetar: entry %q: size %d", h.Name, h.Size)
	case h.Size > lim.MaxFileBytes:
		return fmt.Errorf("safetar: entry %q: %d bytes, more than the %d a file may have", h.Name, h.Size, lim.MaxFileBytes)
	case st.Bytes > lim.MaxTotalBytes:
		return fmt.Errorf("safetar: entry %q: the files hold more than %d bytes in all", h.Name, lim.MaxTotalBytes)
	}
	return nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "named pipe"
	case tar.TypeGNUSparse:
		return "sparse file"
	}
	return fmt.Sprintf("entry of type %q", t)
}

// walk reads every entry of the tar in r, checks it (names, types,
// limits, no name twice, case-insensitively as on Windows, no entry under
// a file) and calls each with it; each must consume a file's content.
func walk(r io.Reader, lim Limits, each func(h *tar.Header, rel string, tr *tar.Reader) error) (Stats, error) {
	lim = lim.withDefaults()
	var st Stats
	seen := map[string]bool{} // folded name -> is a directory
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("safetar: %w", err)
		}
		if h.Typeflag == tar.TypeDir {
			st.Dirs++
		} else {
			st.Files++
			st.Bytes += h.Size
		}
		if err := checkHeader(h, lim, &st); err != nil {
			return st, err
		}
		rel := strings.TrimSuffix(h.Name, "/")
		key := strings.ToLower(rel)
		if _, dup := seen[key]; dup {
			return st, fmt.Errorf("safetar: entry %q: a second entry of that name (names compare without case, as on Windows)", h.Name)
		}
		for dir := path.Dir(key); dir != "."; dir = path.Dir(dir) {
			if isDir, ok := seen[dir]; ok && !isDir {
				return st, fmt.Errorf("safetar: entry %q: under %q, which is a file", h.Name, dir)
			}
		}
		seen[key] = h.Typeflag == tar.TypeDir
		if err := each(h, rel, tr); err != nil {
			return st, err
		}
	}
}

// Check reads the whole tar in r by Unpack's rules and writes nothing:
// for an archive read back before it is trusted.
func Check(r io.Reader, lim Limits) (Stats, error) {
	return walk(r, lim, func(h *tar.Header, _ string, tr *tar.Reader) error {
		n, err := io.Copy(io.Discard, tr)
		if err == nil && n != h.Size {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return fmt.Errorf("safetar: entry %q: %w", h.Name, err)
		}
		return nil
	})
}

// Unpack extracts the tar in r into the existing directory dst through
// os.Root (no entry, and no link found in dst, leads outside it): files
// created new (a name that exists is an error) with their permission bits
// less group and world write, owner read-write always; directories 0700
// plus the entry's read and execute bits; missing parents made. Any
// entry CheckName, the type rule or lim refuses is an error. On an error
// what was written stays: extract into a fresh directory and remove it.
// Unpack reads r up to the tar's end-of-archive marker and no further.
func Unpack(r io.Reader, dst string, lim Limits) (Stats, error) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	return walk(r, lim, func(h *tar.Header, rel string, tr *tar.Reader) error {
		if err := root.MkdirAll(path.Dir(rel), 0o700); err != nil && path.Dir(rel) != "." {
			return fmt.Errorf("safetar: entry %q: %w", h.Name, err)
		}
		perm := fs.FileMode(h.Mode).Perm()
		if h.Typeflag == tar.TypeDir {
			err := root.Mkdir(rel, 0o700|perm&0o055)
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("safetar: entry %q: %w", h.Name, err)
			}
			return nil
		}
		f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600|perm&0o755)
		if err != nil {
			return fmt.Errorf("safetar: entry %q: %w", h.Name, err)
		}
		n, err := io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && n != h.Size {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return fmt.Errorf("safetar: entry %q: %w", h.Name, err)
		}
		return nil
	})
}
