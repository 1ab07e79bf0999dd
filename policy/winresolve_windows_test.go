package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

// winHost is a profile and a workdir inside it, real folders on this
// Windows host: profiles\me (the profile, ctx.Home) with work in it, and
// profiles\alice, another user's.
type winHost struct{ root, profiles, home, work, alice string }

func newWinHost(t *testing.T) winHost {
	t.Helper()
	root, err := canonical(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := winHost{root: root, profiles: filepath.Join(root, "profiles")}
	h.home = filepath.Join(h.profiles, "me")
	h.work = filepath.Join(h.home, "work")
	h.alice = filepath.Join(h.profiles, "alice")
	for _, d := range []string{h.work, filepath.Join(h.alice, "Documents"), filepath.Join(root, "outside", "secret"), filepath.Join(h.work, "Long Directory Name")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h winHost) resolve(t *testing.T, src string) (*Resolved, error) {
	t.Helper()
	p, err := ParseFor([]byte(src), "win.yaml", OSWindows)
	if err != nil {
		return nil, err
	}
	return p.Resolve(Context{Home: h.home, Workdir: h.work, Environ: h.environ()})
}

// environ is this process's environment with PUBLIC in h.profiles, which
// makes h.profiles a profiles directory (as C:\Users is).
func (h winHost) environ() []string {
	return append([]string{"PUBLIC=" + filepath.Join(h.profiles, "Public")}, os.Environ()...)
}

func q(p string) string { return "'" + strings.ReplaceAll(p, "'", "''") + "'" }

// access is the access of the grant of path (compared without case).
func access(r *Resolved, path string) Access {
	for _, g := range r.Grants {
		if strings.EqualFold(g.Path, path) {
			return g.Access
		}
	}
	return ""
}

// TestWindowsDefaultResolvesOnHost: the built-in Windows default resolves
// here, with the Windows directory read-only and the workdir read-write.
func TestWindowsDefaultResolvesOnHost(t *testing.T) {
	h := newWinHost(t)
	r, err := DefaultFor(OSWindows).Resolve(Context{Home: h.home, Workdir: h.work, Environ: h.environ()})
	if err != nil {
		t.Fatal(err)
	}
	win, err := canonical(`C:\Windows`) // the default's first read-only entry
	if err != nil {
		t.Fatal(err)
	}
	if access(r, win) != AccessReadOnly {
		t.Errorf("%s not granted read-only: %+v", win, r.Grants)
	}
	if access(r, h.work) != AccessReadWrite || r.Lexical != "" {
		t.Errorf("workdir %s: %+v (lexical %q)", h.work, r.Grants, r.Lexical)
	}
	var path string
	for _, kv := range r.Env {
		if k, v, _ := strings.Cut(kv, "="); strings.EqualFold(k, "PATH") {
			path = v
		}
		if k, _, _ := strings.Cut(kv, "="); strings.EqualFold(k, "USERPROFILE") || strings.EqualFold(k, "APPDATA") {
			t.Errorf("the profile leaks through %s", kv)
		}
	}
	if path == "" || path == DefaultPATHWindows && os.Getenv("PATH") != "" {
		t.Errorf("the caller's Path is not passed (names without case): PATH=%q", path)
	}
}

// TestWindowsCaseAndShortNamesDecideAsTheLongPath is P35's decision half
// on the host: a grant written in another case, with "/" separators, or
// through its 8.3 alias is the same grant as the plain long path, so a
// deny written one way beats a read-write grant written another.
func TestWindowsCaseAndShortNamesDecideAsTheLongPath(t *testing.T) {
	h := newWinHost(t)
	long := filepath.Join(h.work, "Long Directory Name")
	forms := []string{strings.ToUpper(long), strings.ReplaceAll(strings.ToLower(long), `\`, "/")}
	short := shortName(t, long)
	if short != "" {
		forms = append(forms, short)
	}
	for _, f := range forms {
		r, err := h.resolve(t, "version: 1\nfilesystem:\n  read_only: []\n  read_write: ["+q(long)+"]\n  deny: ["+q(f)+"]\n")
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		n := 0
		for _, g := range r.Grants {
			if strings.EqualFold(g.Path, long) {
				n++
				if g.Access != AccessDeny || g.Path != long {
					t.Errorf("deny %q: grant %+v, want deny of %s itself (its long name, on-disk case)", f, g, long)
				}
			}
		}
		if n != 1 {
			t.Errorf("deny %q: %d grants of %s in %+v, want one", f, n, long, r.Grants)
		}
	}
	if short == "" {
		wine.SkipArtifact(t, "GetShortPathNameW gives no 8.3 alias on Wine's volume (case and separator forms were checked)")
		t.Skip("the volume generates no 8.3 names (fsutil 8dot3name): case and separator forms were checked")
	}
}

// shortName is the 8.3 alias of long, or "" when the volume has none.
func shortName(t *testing.T, long string) string {
	p, _ := windows.UTF16PtrFromString(long)
	buf := make([]uint16, windows.MAX_LONG_PATH)
	n, err := windows.GetShortPathName(p, &buf[0], uint32(len(buf)))
	if err != nil {
		t.Fatal(err)
	}
	s := windows.UTF16ToString(buf[:n])
	if strings.EqualFold(s, long) {
		return ""
	}
	return s
}

// TestWindowsDangerousGrantsOnHost: another user's profile is never
// granted, nor is the profile read-write; denying is fine.
func TestWindowsDangerousGrantsOnHost(t *testing.T) {
	h := newWinHost(t)
	for _, c := range []struct{ src, want string }{
		{"read_only: [" + q(filepath.Join(h.alice, "Documents")) + "]", "another user's profile"},
		{"read_write: [" + q(h.home) + "]", "your profile"},
		{"read_write: [" + q(h.profiles) + "]", "every user's profile"},
		{"read_write: [" + q(filepath.Join(os.Getenv("SystemRoot"), "Temp")) + "]", "would let the workload modify the host"},
		{"read_write: [" + q(filepath.VolumeName(h.root)+`\`) + "]", "drive root"},
	} {
		_, err := h.resolve(t, "version: 1\nfilesystem:\n  "+c.src+"\n")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.src, err, c.want)
		}
	}
	// The caller's environment can add system folders, never remove them.
	p, err := ParseFor([]byte("version: 1\nfilesystem:\n  read_write: ["+q(filepath.Join(os.Getenv("SystemRoot"), "Temp"))+"]\n"), "w.yaml", OSWindows)
	if err != nil {
		t.Fatal(err)
	}
	hostile := append([]string{`SystemRoot=D:\x`, `windir=D:\x`, `ProgramData=D:\y`, `ProgramFiles=D:\z`}, h.environ()...) // the first of a name wins
	if _, err := p.Resolve(Context{Home: h.home, Workdir: h.work, Environ: hostile}); err == nil || !strings.Contains(err.Error(), "modify the host") {
		t.Errorf("with SystemRoot moved by the environment: %v, want the Windows folder still refused", err)
	}
	if _, err := h.resolve(t, "version: 1\nfilesystem:\n  deny: ["+q(h.alice)+"]\n"); err != nil {
		t.Errorf("denying another user's profile: %v", err)
	}
}

// TestWindowsLinksFollowTargetAndPlantedRefused: a grant through a link
// inside a read-write grant (which the workload could have made) is
// refused, and so is one through a link a user made elsewhere; a grant
// through the system's own junction applies to its target; a link inside
// a granted folder to a folder outside every grant does not make that
// folder visible (it is not a grant).
func TestWindowsLinksFollowTargetAndPlantedRefused(t *testing.T) {
	h := newWinHost(t)
	secret := filepath.Join(h.root, "outside", "secret")
	planted := filepath.Join(h.work, "planted")
	if err := makeJunction(planted, secret); err != nil {
		wine.SkipArtifact(t, "FSCTL_SET_REPARSE_POINT is not supported, so no junction can be made ("+err.Error()+"), and CreateSymbolicLinkW reports success but makes nothing")
		t.Fatalf("making a junction: %v", err)
	}
	// Through the planted junction: refused, naming it.
	_, err := h.resolve(t, "version: 1\nfilesystem:\n  read_only: ["+q(planted)+"]\n")
	if err == nil || !strings.Contains(err.Error(), "inside the read-write grant") {
		t.Errorf("grant through a junction in the workdir: %v", err)
	}
	// A junction outside every read-write grant that the user made (as a
	// workload of an earlier run granted that folder could have): refused
	// too, naming its owner.
	elsewhere := filepath.Join(h.root, "outside", "link")
	if err := makeJunction(elsewhere, secret); err != nil {
		t.Fatal(err)
	}
	_, err = h.resolve(t, "version: 1\nfilesystem:\n  read_only: ["+q(elsewhere)+"]\n")
	if err == nil || !strings.Contains(err.Error(), "not by SYSTEM, Administrators or TrustedInstaller") {
		t.Errorf("grant through a user's junction %s: %v", elsewhere, err)
	}
	// The system's own junction (C:\Documents and Settings -> C:\Users,
	// owned by SYSTEM) is followed: the grant is of its target.
	if fi, err := os.Lstat(`C:\Documents and Settings`); err == nil && fi.Mode()&os.ModeIrregular != 0 {
		r, err := h.resolve(t, "version: 1\nfilesystem:\n  read_only: ['C:\\Documents and Settings\\Public']\n")
		if err != nil || access(r, `C:\Users\Public`) != AccessReadOnly {
			t.Errorf("grant through the system's junction: %v %+v", err, r)
		}
	}
	// The workdir's junction to secret makes nothing outside visible.
	r, err := h.resolve(t, "version: 1\nfilesystem:\n  read_only: []\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Visible(secret) {
		t.Errorf("%s visible through the junction %s: %+v", secret, planted, r.Grants)
	}
}

// makeJunction makes link a directory junction to target: an empty
// folder given a mount-point reparse point (FSCTL_SET_REPARSE_POINT with a
// REPARSE_DATA_BUFFER of tag IO_REPARSE_TAG_MOUNT_POINT, as mklink /J
// does), which needs no privilege.
func makeJunction(link, target string) error {
	if err := os.Mkdir(link, 0o755); err != nil {
		return err
	}
	p, err := windows.UTF16PtrFromString(link)
	if err != nil {
		return err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_WRITE, 0, nil, windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(h)
	sub, err := windows.UTF16FromString(`\??\` + target)
	if err != nil {
		return err
	}
	sub = sub[:len(sub)-1]
	// Header (tag, data length, reserved), then the substitute name's
	// offset and length, the print name's (empty, after the substitute
	// name's NUL), the names.
	buf := make([]byte, 16+2*len(sub)+4)
	le := func(off int, v uint16) { buf[off], buf[off+1] = byte(v), byte(v>>8) }
	le(0, uint16(windows.IO_REPARSE_TAG_MOUNT_POINT&0xffff))
	le(2, uint16(windows.IO_REPARSE_TAG_MOUNT_POINT>>16))
	le(4, uint16(len(buf)-8))
	le(10, uint16(2*len(sub)))
	le(12, uint16(2*len(sub)+2))
	for i, c := range sub {
		le(16+2*i, c)
	}
	var n uint32
	return windows.DeviceIoControl(h, windows.FSCTL_SET_REPARSE_POINT, &buf[0], uint32(len(buf)), nil, 0, &n, nil)
}
