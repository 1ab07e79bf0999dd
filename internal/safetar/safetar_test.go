package safetar

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	}{
		{"a symlink", []entry{{name: "evil", typ: tar.TypeSymlink, link: "../../outside"}}, "symlink"},
		{"a symlink then a file through it", []entry{{name: "d", typ: tar.TypeSymlink, link: ".."}, reg("d/x")}, "symlink"},
		{"a hard link", []entry{reg("a"), {name: "b", typ: tar.TypeLink, link: "a"}}, "hard link"},
		{"a device", []entry{{name: "dev", typ: tar.TypeChar}}, "device"},
		{"a fifo", []entry{{name: "p", typ: tar.TypeFifo}}, "named pipe"},
		{"an absolute name", []entry{reg("/etc/x")}, "absolute"},
		{"..", []entry{reg("../x")}, `".." component`},
		{"a nested ..", []entry{reg("a/../../x")}, `".." component`},
		{"a drive", []entry{reg("C:x")}, `":"`},
		{"a stream", []entry{reg("x:stream")}, `":"`},
		{"a backslash", []entry{reg(`a\..\..\x`)}, "backslash"},
		{"a device name", []entry{reg("nul")}, "device name"},
		{"a device name with an extension", []entry{reg("dir/CON.txt")}, "device name"},
		{"a superscript COM", []entry{reg("com¹")}, "device name"},
		{"a trailing dot", []entry{reg("a./b")}, "dot or a space"},
		{"a trailing space", []entry{reg("b ")}, "dot or a space"},
		{"a control character", []entry{reg("a\x01b")}, "control"},
		{"a wildcard", []entry{reg("a*")}, "Windows does not allow"},
		{"an empty component", []entry{reg("a//b")}, "empty component"},
		{"a dot component", []entry{reg("./a")}, `"." component`},
		{"a duplicate", []entry{reg("a"), reg("a")}, "second entry"},
		{"a case duplicate", []entry{reg("Readme"), reg("README")}, "second entry"},
		{"under a file", []entry{reg("f"), reg("f/g")}, "which is a file"},
		{"an oversized file", []entry{{name: "big", typ: tar.TypeReg, size: 101}}, "more than the 100"},
		{"over the total", []entry{{name: "a", typ: tar.TypeReg, size: 80}, {name: "b", typ: tar.TypeReg, size: 80}}, "in all"},
		{"too many entries", []entry{reg("a"), reg("b"), reg("c"), reg("d")}, "more than 3 entries"},
		{"a short file", []entry{{name: "cut", typ: tar.TypeReg, size: 60, short: true}}, "unexpected EOF"},
	}
	for _, c := range cases {
		t.Run(c.why, func(t *testing.T) {
			a := archive(t, c.es...)
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
