package safetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"a.txt": "alpha", ".config/app.json": `{"k":1}`, "deep/er/still/x.bin": strings.Repeat("x", 70000)}
	for name, data := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Not everywhere: Windows without the privilege refuses, Wine 8
	// reports success and makes nothing (wine.NoSymlinks).
	linked := false
	if os.Symlink("/etc/passwd", filepath.Join(src, "link")) == nil {
		fi, err := os.Lstat(filepath.Join(src, "link"))
		linked = err == nil && fi.Mode()&os.ModeSymlink != 0
	}
	var buf bytes.Buffer
	st, err := Pack(&buf, src, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Dirs != 5 || st.Bytes != 5+7+70000 {
		t.Errorf("pack stats %+v, want 3 files, 5 directories, 70012 bytes", st)
	}
	if linked && (len(st.Skipped) != 1 || st.Skipped[0] != "link") {
		t.Errorf("skipped %v, want the symlink", st.Skipped)
	}
	if _, err := Check(bytes.NewReader(buf.Bytes()), Limits{}); err != nil {
		t.Fatalf("Check refuses what Pack wrote: %v", err)
	}
	dst := t.TempDir()
	if _, err := Unpack(bytes.NewReader(buf.Bytes()), dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		b, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
		if err != nil || string(b) != data {
			t.Errorf("%s after the round trip: %q %v", name, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "empty")); err != nil || !fi.IsDir() {
		t.Errorf("the empty directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "link")); err == nil {
		t.Errorf("a symlink was carried")
	}
}

// entry is one hand-made tar entry.
type entry struct {
	name, link string
	typ        byte
	size       int64 // the header's; data is size bytes unless short
	short      bool  // the stream ends in the data
}

func archive(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Size: e.size, Mode: 0o644, Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeXGlobalHeader {
			h = &tar.Header{Name: e.name, Typeflag: e.typ, PAXRecords: map[string]string{"comment": "x"}}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.short {
			tw.Write(bytes.Repeat([]byte("z"), int(e.size/2)))
			return buf.Bytes() // cut in the data
		}
		if h.Size > 0 {
			if _, err := tw.Write(bytes.Repeat([]byte("z"), int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every hostile archive is refused by Check and by Unpack, and Unpack
// writes nothing outside its destination and no link inside it.
func TestHostile(t *testing.T) {
	small := Limits{MaxFileBytes: 100, MaxTotalBytes: 150, MaxEntries: 3}
	reg := func(name string) entry { return entry{name: name, typ: tar.TypeReg, size: 1} }
	cases := []struct {
		why  string
		es   []entry
		want string
		raw  []byte // the archive, when not made of es
	}{
		{"a symlink", []entry{{name: "evil", typ: tar.TypeSymlink, link: "../../outside"}}, "symlink", nil},
		{"a symlink then a file through it", []entry{{name: "d", typ: tar.TypeSymlink, link: ".."}, reg("d/x")}, "symlink", nil},
		{"a hard link", []entry{reg("a"), {name: "b", typ: tar.TypeLink, link: "a"}}, "hard link", nil},
		{"a device", []entry{{name: "dev", typ: tar.TypeChar}}, "device", nil},
		{"a fifo", []entry{{name: "p", typ: tar.TypeFifo}}, "named pipe", nil},
		{"an absolute name", []entry{reg("/etc/x")}, "absolute", nil},
		{"..", []entry{reg("../x")}, `".." component`, nil},
		{"a nested ..", []entry{reg("a/../../x")}, `".." component`, nil},
		{"a drive", []entry{reg("C:x")}, `":"`, nil},
		{"a stream", []entry{reg("x:stream")}, `":"`, nil},
		{"a backslash", []entry{reg(`a\..\..\x`)}, "backslash", nil},
		{"a device name", []entry{reg("nul")}, "device name", nil},
		{"a device name with an extension", []entry{reg("dir/CON.txt")}, "device name", nil},
		{"a superscript COM", []entry{reg("com¹")}, "device name", nil},
		{"a trailing dot", []entry{reg("a./b")}, "dot or a space", nil},
		{"a trailing space", []entry{reg("b ")}, "dot or a space", nil},
		{"a control character", []entry{reg("a\x01b")}, "control", nil},
		{"a wildcard", []entry{reg("a*")}, "Windows does not allow", nil},
		{"an empty component", []entry{reg("a//b")}, "empty component", nil},
		{"a dot component", []entry{reg("./a")}, `"." component`, nil},
		{"a duplicate", []entry{reg("a"), reg("a")}, "second entry", nil},
		{"a case duplicate", []entry{reg("Readme"), reg("README")}, "second entry", nil},
		{"under a file", []entry{reg("f"), reg("f/g")}, "which is a file", nil},
		{"an oversized file", []entry{{name: "big", typ: tar.TypeReg, size: 101}}, "more than the 100", nil},
		{"over the total", []entry{{name: "a", typ: tar.TypeReg, size: 80}, {name: "b", typ: tar.TypeReg, size: 80}}, "in all", nil},
		{"too many entries", []entry{reg("a"), reg("b"), reg("c"), reg("d")}, "more than 3 entries", nil},
		{"a short file", []entry{{name: "cut", typ: tar.TypeReg, size: 60, short: true}}, "unexpected EOF", nil},
		{"a file where a directory was implied", []entry{reg("x/y"), reg("X")}, "second entry", nil},
		{"a file under a file, by case", []entry{reg("f"), reg("F/g")}, "which is a file", nil},
		{"implied directories over the count", []entry{reg("a/b/c/d")}, "counting the directories", nil},
		{"a global header", []entry{{name: "g", typ: tar.TypeXGlobalHeader}}, "global header", nil},
		{"a PAX sparse file", nil, "sparse file", paxSparse(t)},
		{"no end-of-archive marker", nil, "end-of-archive marker", unterminated(t)},
	}
	for _, c := range cases {
		t.Run(c.why, func(t *testing.T) {
			a := c.raw
			if a == nil {
				a = archive(t, c.es...)
			}
			if _, err := Check(bytes.NewReader(a), small); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check: %v, want an error with %q", err, c.want)
			}
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			if err := os.Mkdir(dst, 0o700); err != nil {
				t.Fatal(err)
			}
			if _, err := Unpack(bytes.NewReader(a), dst, small); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Unpack: %v, want an error with %q", err, c.want)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("Unpack wrote beside its destination: %v", ents)
			}
			filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Type()&os.ModeSymlink != 0 {
					t.Errorf("Unpack made a link: %s", p)
				}
				return nil
			})
		})
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{".config/app.json", "node_modules/a/b.js", "dir/", "a.b.c", "con-fig", "nulls", "été/x"} {
		if err := CheckName(ok, Limits{}); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	if err := CheckName(strings.Repeat("a/", 65)+"x", Limits{}); err == nil {
		t.Errorf("65 levels deep accepted")
	}
	if err := CheckName(strings.Repeat("a", 1025), Limits{}); err == nil {
		t.Errorf("1025 bytes accepted")
	}
}

// skip leaves out an entry and a directory's subtree.
func TestPackSkip(t *testing.T) {
	src := t.TempDir()
	for _, p := range []string{"keep/a", ".cache/b/c"} {
		os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o700)
		if err := os.WriteFile(filepath.Join(src, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := Pack(&bytes.Buffer{}, src, Limits{}, func(rel string, _ os.DirEntry) bool { return rel == ".cache" })
	if err != nil || st.Files != 1 || st.Dirs != 1 {
		t.Errorf("Pack skipping .cache: %+v %v, want keep/ and keep/a only", st, err)
	}
}

// Pack refuses a tree its reader would refuse, rather than writing it.
func TestPackRefusesWhatUnpackWould(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big"), make([]byte, 200), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(&bytes.Buffer{}, src, Limits{MaxFileBytes: 100}, nil); err == nil || !strings.Contains(err.Error(), "more than the 100") {
		t.Errorf("Pack of an oversized file: %v", err)
	}
}

// paxSparse is a TypeReg entry made sparse by GNU.sparse PAX records
// (0.1 format), which archive/tar's Writer will not write: archive/tar's
// Reader would expand its 1 stored byte to 90.
func paxSparse(t *testing.T) []byte {
	t.Helper()
	var rec []byte
	for _, kv := range [][2]string{{"GNU.sparse.size", "90"}, {"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "0,1"}} {
		r := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(r) + 2 // two digits of length
		rec = append(rec, []byte(strconv.Itoa(n)+r)...)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Written as a TypeReg, then made a PAX header: the Writer encodes
	// none by hand. Flag at byte 156, checksum at 148 (POSIX ustar).
	if err := tw.WriteHeader(&tar.Header{Name: "PaxHeaders/s", Typeflag: tar.TypeReg, Size: int64(len(rec)), Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	tw.Write(rec)
	tw.Flush()
	blk := buf.Bytes()[:512]
	blk[156] = tar.TypeXHeader
	copy(blk[148:156], "        ")
	sum := 0
	for _, b := range blk {
		sum += int(b)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	if err := tw.WriteHeader(&tar.Header{Name: "s", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644, Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte("s"))
	tw.Close()
	if h, err := tar.NewReader(bytes.NewReader(buf.Bytes())).Next(); err != nil || h.Size != 90 {
		t.Fatalf("not the sparse entry meant: %+v %v", h, err)
	}
	return buf.Bytes()
}

// unterminated is a whole entry and no end-of-archive marker (flushed,
// not closed): a stream cut at an entry's end.
func unterminated(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte("a"))
	tw.Flush()
	return buf.Bytes()
}

// Unpack and Check stop at the end-of-archive marker: what follows stays
// in the reader, for a caller that hashes the whole stream.
func TestReadsNoFurther(t *testing.T) {
	a := archive(t, entry{name: "d", typ: tar.TypeDir}, entry{name: "d/f", typ: tar.TypeReg, size: 700})
	for _, unpack := range []bool{false, true} {
		r := bytes.NewReader(append(a[:len(a):len(a)], "TRAILER"...))
		var err error
		if unpack {
			_, err = Unpack(r, t.TempDir(), Limits{})
		} else {
			_, err = Check(r, Limits{})
		}
		if rest, _ := io.ReadAll(r); err != nil || string(rest) != "TRAILER" {
			t.Errorf("unpack %v: %v, left %q, want TRAILER", unpack, err, rest)
		}
	}
	// A reader that returns its last bytes with io.EOF still ends in a
	// marker; one byte at a time still stops at it.
	if _, err := Check(iotest.DataErrReader(bytes.NewReader(a)), Limits{}); err != nil {
		t.Errorf("Check of a reader ending with data and io.EOF: %v", err)
	}
	r := bytes.NewReader(append(a[:len(a):len(a)], "TRAILER"...))
	if _, err := Check(iotest.OneByteReader(r), Limits{}); err != nil || r.Len() != len("TRAILER") {
		t.Errorf("Check one byte at a time: %v, %d bytes left", err, r.Len())
	}
}

// Modes come back without group or world write and always owner rw
// (not on Windows, which keeps no permission bits); modification times
// come back everywhere.
func TestRoundTripModes(t *testing.T) {
	perms := runtime.GOOS != "windows"
	src := t.TempDir()
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	modes := map[string][2]os.FileMode{"exec": {0o755, 0o755}, "open": {0o666, 0o644}, "ro": {0o400, 0o600}, "grp": {0o640, 0o640}}
	for name, m := range modes {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, mtime, mtime)
		if err := os.Chmod(p, m[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "d"), 0o777); err != nil || os.Chmod(filepath.Join(src, "d"), 0o777) != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Pack(&buf, src, Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := Unpack(&buf, dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	for name, m := range modes {
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil || perms && fi.Mode().Perm() != m[1] || !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: %v %v, want %v and %v", name, fi.Mode().Perm(), fi.ModTime(), m[1], mtime)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "d")); err != nil || perms && fi.Mode().Perm() != 0o755 {
		t.Errorf("d: %v, want 0755", fi.Mode().Perm())
	}
}

func TestCheckNameRefuses(t *testing.T) {
	for _, bad := range []string{"", "/etc/x", "../x", "a/../../x", "C:x", "x:stream", `a\b`, "nul", "NUL/x", "con.txt", "Aux .c", "lpt³", "a./b", "b ", "a\x00b", "a\x7fb", "a<b", "a|b", "a?", `a"b`, "a//b", "./a", "a/.", "dir//", "\xff"} {
		if err := CheckName(bad, Limits{}); err == nil {
			t.Errorf("CheckName(%q) accepted", bad)
		}
	}
}
