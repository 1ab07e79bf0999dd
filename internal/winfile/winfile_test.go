//go:build windows

package winfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

// create makes path (a file, or a directory when dir) with the security
// descriptor of SDDL sddl, %s in it standing for the caller's SID.
func create(t *testing.T, path, sddl string, dir bool) {
	t.Helper()
	user, err := User()
	if err != nil {
		t.Fatal(err)
	}
	sd, err := windows.SecurityDescriptorFromString(strings.ReplaceAll(sddl, "%s", user.String()))
	if err != nil {
		t.Fatal(err)
	}
	var h windows.Handle
	if dir {
		h, err = Walk{Mkdir: sd}.OpenDir(path, 0)
	} else {
		h, err = Open(path, windows.FILE_WRITE_DATA|windows.SYNCHRONIZE, windows.FILE_CREATE, windows.FILE_NON_DIRECTORY_FILE, sd)
	}
	if err != nil {
		t.Fatal(err)
	}
	windows.CloseHandle(h)
}

// open opens path for reading its attributes and security descriptor.
func open(t *testing.T, path string) windows.Handle {
	t.Helper()
	h, err := Open(path, windows.FILE_READ_ATTRIBUTES|windows.READ_CONTROL|windows.SYNCHRONIZE, windows.FILE_OPEN, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { windows.CloseHandle(h) })
	return h
}

// keptEveryone skips t as a Wine artifact unless path's DACL, read back,
// grants Everyone a right in mask (or is NULL): Wine keeps a DACL only as
// the Unix mode bits it maps it to, and maps no write or control right of
// Everyone's, nor a NULL DACL, to any.
func keptEveryone(t *testing.T, path string, mask uint32) {
	t.Helper()
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	dacl, _, err := sd.DACL()
	if err == nil && dacl == nil {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	everyone, _ := windows.CreateWellKnownSid(windows.WinWorldSid)
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			t.Fatal(err)
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		if ace.Header.AceType == windows.ACCESS_ALLOWED_ACE_TYPE && sid.Equals(everyone) && fileRights(uint32(ace.Mask))&mask != 0 {
			return
		}
	}
	wine.SkipArtifact(t, "Wine keeps a DACL only as Unix mode bits, and Everyone's write and control rights and a NULL DACL map to none: "+path+" reads back as "+sd.String())
	t.Fatalf("%s: the DACL made reads back as %s", path, sd)
}

func user(t *testing.T) *windows.SID {
	t.Helper()
	u, err := User()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A file made with OwnerOnly is Private; one whose DACL has an ACE for
// Everyone (S-1-1-0), or that has a NULL DACL, is not.
func TestPrivate(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, sddl, want string }{
		{"mine", "O:%sD:P(A;;FA;;;%s)", ""},
		{"everyone-reads", "O:%sD:P(A;;FA;;;%s)(A;;FR;;;WD)", "S-1-1-0) have access"},
		{"everyone-generic", "O:%sD:P(A;;FA;;;%s)(A;;GR;;;WD)", "S-1-1-0) have access"},
		{"inherit-only", "O:%sD:P(A;;FA;;;%s)(A;IO;FA;;;WD)", ""},
		{"null", "O:%sD:NO_ACCESS_CONTROL", "has no DACL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			create(t, path, c.sddl, false)
			if c.want != "" {
				keptEveryone(t, path, ^uint32(0))
			}
			err := Private(open(t, path), user(t))
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				sd, _ := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
				t.Errorf("Private = %v, want %q (DACL %s)", err, c.want, sd)
			}
		})
	}
}

// TrustedDir refuses a directory others may control (delete children,
// change its DACL) and, when it holds the file, one they may add to.
func TestTrustedDir(t *testing.T) {
	base := t.TempDir()
	for _, c := range []struct {
		name, sddl string
		last       bool
		mask       uint32 // Everyone's rights the case is about
		want       string
	}{
		{"mine", "O:%sD:P(A;OICI;FA;;;%s)", true, 0, ""},
		{"everyone-lists", "O:%sD:P(A;OICI;FA;;;%s)(A;;FRFX;;;WD)", true, 0, ""},
		{"everyone-deletes-children", "O:%sD:P(A;OICI;FA;;;%s)(A;;0x40;;;WD)", false, fileDeleteChild, "delete children"},
		{"everyone-rewrites-dacl", "O:%sD:P(A;OICI;FA;;;%s)(A;;WD;;;WD)", false, windows.WRITE_DAC, "change the DACL"},
		{"everyone-adds", "O:%sD:P(A;OICI;FA;;;%s)(A;;0x6;;;WD)", true, AddEntries, "add files"},
		{"everyone-adds-above", "O:%sD:P(A;OICI;FA;;;%s)(A;;0x6;;;WD)", false, AddEntries, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(base, c.name)
			create(t, path, c.sddl, true)
			if c.mask != 0 {
				keptEveryone(t, path, c.mask)
			}
			err := TrustedDir(open(t, path), user(t), c.last)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				sd, _ := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
				t.Errorf("TrustedDir = %v, want %q (DACL %s)", err, c.want, sd)
			}
		})
	}
}

// CheckFile refuses a file with a second hard link: whoever made the link
// reads what is written to it.
func TestCheckFileRefusesHardLinks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	create(t, path, "O:%sD:P(A;;FA;;;%s)", false)
	h := open(t, path)
	if err := CheckFile(h, user(t)); err != nil {
		t.Fatalf("CheckFile of a plain file: %v", err)
	}
	if err := os.Link(path, filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(h, user(t)); err == nil || !strings.Contains(err.Error(), "has 2 hard links") {
		t.Errorf("CheckFile = %v, want 2 hard links refused", err)
	}
}

// CheckFile refuses a file another SID owns. The SID asked for is swapped
// rather than the owner: giving a file another owner needs
// SeRestorePrivilege.
func TestCheckFileRefusesForeignOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	create(t, path, "O:%sD:P(A;;FA;;;%s)", false)
	if err := CheckFile(open(t, path), system); err == nil || !strings.Contains(err.Error(), "is owned by") {
		t.Errorf("CheckFile = %v, want it refused as owned by another", err)
	}
}

// CheckFile refuses a handle that is no disk file: a pipe, a device. (By
// path, such names end in the volume part, ErrNoName, or are in the
// device namespace, ErrDevice.)
func TestCheckFileRefusesPipesAndDevices(t *testing.T) {
	var r, w windows.Handle
	if err := windows.CreatePipe(&r, &w, nil, 0); err != nil {
		t.Fatal(err)
	}
	defer windows.CloseHandle(r)
	defer windows.CloseHandle(w)
	nul, err := windows.CreateFile(windows.StringToUTF16Ptr("NUL"), windows.FILE_APPEND_DATA|windows.READ_CONTROL, shareAll, nil, windows.OPEN_EXISTING, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer windows.CloseHandle(nul)
	for name, h := range map[string]windows.Handle{"pipe": w, "NUL": nul} {
		if err := CheckFile(h, user(t)); err == nil || !strings.Contains(err.Error(), "a device or a pipe") {
			t.Errorf("CheckFile(%s) = %v, want it refused as a device or a pipe", name, err)
		}
	}
	for _, p := range []string{`C:\`} {
		if _, err := Open(p, windows.FILE_READ_ATTRIBUTES, windows.FILE_OPEN, 0, nil); !errors.Is(err, ErrNoName) {
			t.Errorf("Open(%s) = %v, want ErrNoName", p, err)
		}
	}
	// The device namespace is refused before anything is opened (a pipe's
	// server would be connected to).
	for _, p := range []string{"NUL", `\\.\NUL`, `\\.\pipe\x`, `//./pipe/x`, `\\?\GLOBALROOT\Device\x`} {
		if _, err := Open(p, windows.FILE_READ_ATTRIBUTES, windows.FILE_OPEN, 0, nil); !errors.Is(err, ErrDevice) {
			t.Errorf("Open(%s) = %v, want ErrDevice", p, err)
		}
	}
}

// A junction anywhere on the path is refused, as a component and as the
// directory OpenDir opens; nothing is made behind it.
func TestOpenRefusesJunction(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	junction := filepath.Join(dir, "junction")
	if err := MakeJunction(junction, target); err != nil {
		if errors.Is(err, windows.ERROR_NOT_SUPPORTED) {
			wine.SkipArtifact(t, "FSCTL_SET_REPARSE_POINT is not supported (no junctions)")
		}
		t.Fatal(err)
	}
	refusesLink(t, junction, target, "a junction or mount point")
}

// A symlink to a directory anywhere on the path is refused, like a
// junction.
func TestOpenRefusesSymlink(t *testing.T) {
	wine.SkipArtifact(t, wine.NoSymlinks)
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		if errors.Is(err, windows.ERROR_PRIVILEGE_NOT_HELD) {
			t.Skip("making a symlink needs SeCreateSymbolicLinkPrivilege or Developer Mode")
		}
		t.Fatal(err)
	}
	refusesLink(t, link, target, "a symlink")
}

// refusesLink checks that Open through link and OpenDir of link and of a
// path through it are refused as kind, and that nothing was made in target.
func refusesLink(t *testing.T, link, target, kind string) {
	t.Helper()
	var ce *ComponentError
	h, err := Open(filepath.Join(link, "f"), windows.FILE_WRITE_DATA|windows.SYNCHRONIZE, windows.FILE_OPEN_IF, windows.FILE_NON_DIRECTORY_FILE, nil)
	if !errors.As(err, &ce) || ce.Dir != link || !strings.Contains(ce.Error(), kind) {
		t.Errorf("Open through %s = %v, want it refused as %s", link, err, kind)
	}
	if err == nil {
		windows.CloseHandle(h)
	}
	sd, err := OwnerOnlyDir(user(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, filepath.Join(link, "sub")} {
		h, err := Walk{Mkdir: sd}.OpenDir(p, 0)
		if !errors.As(err, &ce) || ce.Dir != link || !strings.Contains(ce.Error(), kind) {
			t.Errorf("OpenDir(%s) = %v, want it refused as %s", p, err, kind)
		}
		if err == nil {
			windows.CloseHandle(h)
		}
	}
	if err := MakePrivateDir(link); err == nil || !strings.Contains(err.Error(), kind) {
		t.Errorf("MakePrivateDir(%s) = %v, want it refused as %s", link, err, kind)
	}
	if ents, err := os.ReadDir(target); err != nil || len(ents) != 0 {
		t.Errorf("made through %s: %v %v", link, ents, err)
	}
}

// A file where a directory is needed is refused, naming it.
func TestOpenRefusesFileAsDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	create(t, file, "O:%sD:P(A;;FA;;;%s)", false)
	var ce *ComponentError
	_, err := Open(filepath.Join(file, "g"), windows.FILE_READ_ATTRIBUTES, windows.FILE_OPEN, 0, nil)
	if !errors.As(err, &ce) || !ce.NotDir || ce.Error() != file+" is not a directory" {
		t.Errorf("Open through a file = %v", err)
	}
	if err := MakePrivateDir(file); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("MakePrivateDir of a file = %v", err)
	}
	if _, err := Open(file+":s", windows.FILE_READ_ATTRIBUTES, windows.FILE_OPEN, 0, nil); !errors.Is(err, ErrStream) {
		t.Errorf("Open of a stream = %v, want ErrStream", err)
	}
}

// Walk.Check sees each directory on the way, the volume root first,
// whether the walk made it, and which is the last; its error stops the
// walk.
func TestWalkCheck(t *testing.T) {
	base := t.TempDir()
	sd, err := OwnerOnlyDir(user(t))
	if err != nil {
		t.Fatal(err)
	}
	var seen []Dir
	w := Walk{Mkdir: sd, Check: func(d Dir) error { seen = append(seen, d); return nil }}
	h, err := w.OpenDir(filepath.Join(base, "a", "b"), 0)
	if err != nil {
		t.Fatal(err)
	}
	windows.CloseHandle(h)
	if len(seen) < 3 || filepath.VolumeName(seen[0].Path)+`\` != seen[0].Path {
		t.Fatalf("seen %v, want the volume root first", seen)
	}
	for i, d := range seen {
		made := d.Path == filepath.Join(base, "a") || d.Path == filepath.Join(base, "a", "b")
		if d.Created != made || d.Last != (i == len(seen)-1) {
			t.Errorf("%s: created %v, last %v", d.Path, d.Created, d.Last)
		}
	}
	if last := seen[len(seen)-1].Path; last != filepath.Join(base, "a", "b") {
		t.Errorf("last %s", last)
	}
	stop := errors.New("stop")
	w.Check = func(d Dir) error {
		if d.Path == filepath.Join(base, "a") {
			return stop
		}
		return nil
	}
	if _, err := w.OpenDir(filepath.Join(base, "a", "c"), 0); err != stop {
		t.Errorf("OpenDir = %v, want Check's error", err)
	}
	if _, err := os.Stat(filepath.Join(base, "a", "c")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made past a refused directory: %v", err)
	}
}

// MakePrivateDir makes missing directories and makes an existing one's
// DACL the caller's alone.
func TestMakePrivateDir(t *testing.T) {
	base := t.TempDir()
	made := filepath.Join(base, "a", "b")
	if err := MakePrivateDir(made); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "a"), made} {
		if err := Private(open(t, p), user(t)); err != nil {
			t.Errorf("%s %v", p, err)
		}
	}
	shared := filepath.Join(base, "shared")
	create(t, shared, "O:%sD:P(A;OICI;FA;;;%s)(A;OICI;FA;;;WD)", true)
	if err := Private(open(t, shared), user(t)); err == nil {
		t.Fatal("a directory with an ACE for Everyone is Private")
	}
	if err := MakePrivateDir(shared); err != nil {
		t.Fatal(err)
	}
	// What an elevated os.MkdirAll makes is owned by Administrators (the
	// token's default owner): taken, and given the caller as owner.
	admins := filepath.Join(base, "admins")
	create(t, admins, "O:BAD:P(A;OICI;FA;;;%s)", true)
	if o, err := Owner(open(t, admins)); err != nil || !o.Equals(administrators) {
		wine.SkipArtifact(t, "a directory made with owner Administrators reads back with another owner")
		t.Fatalf("owner %v %v, want Administrators", o, err)
	}
	if err := MakePrivateDir(admins); err != nil {
		t.Fatalf("a directory owned by Administrators: %v", err)
	}
	if o, err := Owner(open(t, admins)); err != nil || !o.Equals(user(t)) {
		t.Errorf("after MakePrivateDir: owner %v %v, want the caller", o, err)
	}
	if err := Private(open(t, shared), user(t)); err != nil {
		wine.SkipArtifact(t, "SetSecurityInfo succeeds without changing a file's DACL, which reads back made from its Unix mode bits")
		t.Errorf("after MakePrivateDir: %s %v", shared, err)
	}
}
