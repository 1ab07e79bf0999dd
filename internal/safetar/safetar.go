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
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode"
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
	MaxEntries    int   // entries (files and directories, counting those a name implies unlisted)
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
	// Through an os.Root: a path swapped for a link while the walk runs
	// (the home is the workload's) still cannot lead outside dir.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("safetar: %w", err)
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		if skip != nil && skip(rel, d) {
			if d.IsDir() {
				return fs.SkipDir
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
		var f *os.File
		if fi.IsDir() {
			h.Name, h.Typeflag = rel+"/", tar.TypeDir
			st.Dirs++
		} else {
			if f, err = root.Open(rel); err != nil {
				return err
			}
			defer f.Close()
			if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
				err = fmt.Errorf("safetar: %s is no longer a regular file", rel)
			}
			if err != nil {
				return err
			}
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
		if f == nil {
			return nil
		}
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
	t := typeName(h.Typeflag)
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			t = "sparse file" // a TypeReg whose PAX records make archive/tar read holes
		}
	}
	if t != "" {
		return fmt.Errorf("safetar: entry %q: a %s: only regular files and directories are accepted", h.Name, t)
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

// typeName names a type Unpack refuses, "" for a file or a directory.
func typeName(t byte) string {
	switch t {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir:
		return ""
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
	case tar.TypeXGlobalHeader:
		return "global header"
	}
	return fmt.Sprintf("entry of type %q", t)
}

// walk reads every entry of the tar in r, checks it (names, types,
// limits, no name twice, case-insensitively as on Windows, nothing under a
// file, no file where an earlier entry implied a directory) and calls each
// with it; each must consume a file's content. Directories an entry implies
// count as entries (Unpack makes them). A stream that ends without tar's
// end-of-archive marker (two zero blocks) is an error: it was cut short.
func walk(r io.Reader, lim Limits, each func(h *tar.Header, rel string, tr *tar.Reader) error) (Stats, error) {
	lim = lim.withDefaults()
	var st Stats
	// Names are kept as a seeded hash of their case-folded form: a word
	// per name and implied directory, however long the names. A collision
	// can only refuse an archive, never let a duplicate through.
	seed := maphash.MakeSeed()
	key := func(s string) uint64 {
		return maphash.String(seed, strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, s))
	}
	const implied, dir, file = 1, 2, 3
	seen := map[uint64]byte{}
	er := &endReader{r: r}
	tr := tar.NewReader(er)
	for {
		h, err := tr.Next()
		if err == io.EOF && er.hit {
			return st, errors.New("safetar: the stream ends without tar's end-of-archive marker: cut short")
		}
		if err == io.EOF {
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
		for i := range len(rel) {
			if rel[i] != '/' {
				continue
			}
			switch k := key(rel[:i]); seen[k] {
			case file:
				return st, fmt.Errorf("safetar: entry %q: under %q, which is a file", h.Name, rel[:i])
			case 0:
				seen[k] = implied
				if st.Dirs++; st.Files+st.Dirs > lim.MaxEntries {
					return st, fmt.Errorf("safetar: entry %q: more than %d entries, counting the directories it implies", h.Name, lim.MaxEntries)
				}
			}
		}
		k := key(rel)
		switch was := seen[k]; {
		case was == implied && h.Typeflag == tar.TypeDir:
			st.Dirs-- // counted when implied
		case was != 0:
			return st, fmt.Errorf("safetar: entry %q: a second entry of that name (names compare without case, as on Windows)", h.Name)
		}
		seen[k] = file
		if h.Typeflag == tar.TypeDir {
			seen[k] = dir
		}
		if err := each(h, rel, tr); err != nil {
			return st, err
		}
	}
}

// endReader passes reads through, unbuffered, but holds back an io.EOF
// that comes with data until the next Read: so hit is set only when
// tar.Reader asked for bytes past the stream's end. An io.EOF from Next
// without hit means it read the end-of-archive marker, and nothing after.
type endReader struct {
	r        io.Reader
	eof, hit bool
}

func (e *endReader) Read(p []byte) (int, error) {
	if e.eof {
		e.hit = true
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof, e.hit = true, n == 0
		if n > 0 {
			err = nil
		}
	}
	return n, err
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
// plus the entry's read and execute bits; missing parents made (0700);
// files' modification times kept, directories' not. Any
// entry CheckName, the type rule or lim refuses is an error. On an error
// what was written stays: extract into a fresh directory and remove it.
// Unpack reads r up to the tar's end-of-archive marker, which must be
// there, and no further: a caller may hash or check what follows.
func Unpack(r io.Reader, dst string, lim Limits) (Stats, error) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return Stats{}, fmt.Errorf("safetar: %w", err)
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
		if err == nil && !h.ModTime.IsZero() {
			err = root.Chtimes(rel, h.ModTime, h.ModTime)
		}
		if err != nil {
			return fmt.Errorf("safetar: entry %q: %w", h.Name, err)
		}
		return nil
	})
}
