//go:build windows

package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

// fileAllAccess is FILE_ALL_ACCESS (winnt.h), the "FA" of SDDL.
const fileAllAccess = windows.STANDARD_RIGHTS_REQUIRED | windows.SYNCHRONIZE | 0x1ff

// A new log is owned by the caller and has a protected DACL whose one ACE
// gives the caller full control: the counterpart of mode 0600.
func TestFileACL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	user, err := callerSID()
	if err != nil {
		t.Fatal(err)
	}
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil || !owner.Equals(user) {
		t.Errorf("owner %v (%v), want the caller %s", owner, err, user)
	}
	// Deviations Wine makes, which it alone may: it keeps a DACL as Unix
	// mode bits and synthesizes the descriptor from them.
	var wineOnly []string
	ctl, _, err := sd.Control()
	if err != nil {
		t.Fatal(err)
	}
	if ctl&windows.SE_DACL_PROTECTED == 0 {
		wineOnly = append(wineOnly, "DACL not protected")
	}
	dacl, _, err := sd.DACL()
	if err != nil || dacl == nil {
		t.Fatalf("DACL %v (%v): a null DACL grants everyone everything", dacl, err)
	}
	system, _ := windows.CreateWellKnownSid(windows.WinLocalSystemSid)
	mine := 0
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			t.Fatal(err)
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		desc := fmt.Sprintf("ACE %d (type %d, flags %#x, mask %#x, %s)", i, ace.Header.AceType, ace.Header.AceFlags, ace.Mask, sid)
		switch {
		case ace.Header.AceType != windows.ACCESS_ALLOWED_ACE_TYPE || ace.Header.AceFlags != 0:
			t.Errorf("%s: want an allowed ACE, not inherited", desc)
		case sid.Equals(user) && ace.Mask == fileAllAccess:
			mine++
		case sid.Equals(system) && ace.Mask == fileAllAccess:
			wineOnly = append(wineOnly, "an ACE for SYSTEM")
		default:
			t.Errorf("%s: want only the caller's full control", desc)
		}
	}
	if mine != 1 {
		t.Errorf("%d ACEs give the caller full control, want 1 (DACL %s)", mine, sd)
	}
	if len(wineOnly) > 0 && !t.Failed() {
		wine.SkipArtifact(t, "Wine 8 keeps no file security descriptor, only the Unix mode bits it maps a DACL to and synthesizes one from ("+strings.Join(wineOnly, ", ")+")")
		t.Errorf("%s (DACL %s)", strings.Join(wineOnly, ", "), sd)
	}
}

// A log owned by anyone but the caller is refused. The caller is swapped
// rather than the owner: giving a file another owner needs
// SeRestorePrivilege.
func TestOpenRefusesForeignOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	mine := callerSID
	defer func() { callerSID = mine }()
	callerSID = func() (*windows.SID, error) { return windows.CreateWellKnownSid(windows.WinLocalSystemSid) }
	refused(t, path, "is owned by")
}

// Only a regular file is appended to: not a directory, a device, an
// alternate data stream, nor a path through a file.
func TestOpenRefusesNonFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, why string }{
		{dir, "a directory"},
		{dir + `\`, "not a regular file"},
		{"NUL", "not a regular file"},
		{`\\.\NUL`, "not a regular file"},
		{file + ":hidden", "alternate data stream"},
		{filepath.Join(file, "a.jsonl"), file + " is not a directory"},
	} {
		refused(t, c.path, c.why)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != 0 {
		t.Errorf("%s changed: %v %v", file, fi, err)
	}
}

// checkLog refuses a handle that is no disk file: a pipe, a device. (By
// path, such names end in the volume part, refused before any open.)
func TestCheckLogRefusesPipesAndDevices(t *testing.T) {
	user, err := callerSID()
	if err != nil {
		t.Fatal(err)
	}
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
		if err := checkLog(h, user); err == nil || !strings.Contains(err.Error(), "a device or a pipe") {
			t.Errorf("checkLog(%s) = %v, want it refused as a device or a pipe", name, err)
		}
	}
}

// A junction (a directory mount point) anywhere on the path is refused.
// Junctions need no privilege, so this runs for every Windows user.
func TestOpenRefusesJunction(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	junction := filepath.Join(dir, "junction")
	if err := makeJunction(junction, target); err != nil {
		if errors.Is(err, windows.ERROR_NOT_SUPPORTED) {
			wine.SkipArtifact(t, "FSCTL_SET_REPARSE_POINT is not supported (no junctions)")
		}
		t.Fatal(err)
	}
	refused(t, filepath.Join(junction, "a.jsonl"), "is a junction or mount point; give the real path")
	refused(t, junction, "a directory")
	if _, err := os.Stat(filepath.Join(target, "a.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was made through the junction (%v)", err)
	}
}

// makeJunction makes the directory link a junction to target
// (FSCTL_SET_REPARSE_POINT with a REPARSE_DATA_BUFFER's
// MountPointReparseBuffer, as mklink /J does).
func makeJunction(link, target string) error {
	if err := os.Mkdir(link, 0o700); err != nil {
		return err
	}
	sub, err := windows.UTF16FromString(`\??\` + target)
	if err != nil {
		return err
	}
	sub = sub[:len(sub)-1] // without the NUL
	n := 2 * len(sub)
	// Tag, data length, reserved; substitute name offset and length,
	// print name offset (after the substitute's NUL) and length 0; names.
	buf := make([]byte, 16+n+4)
	put := func(off int, v int) { buf[off], buf[off+1] = byte(v), byte(v>>8) }
	put(0, windows.IO_REPARSE_TAG_MOUNT_POINT&0xffff)
	put(2, windows.IO_REPARSE_TAG_MOUNT_POINT>>16)
	put(4, len(buf)-8)
	put(10, n)
	put(12, n+2)
	for i, c := range sub {
		put(16+2*i, int(c))
	}
	p, err := windows.UTF16PtrFromString(link)
	if err != nil {
		return err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_WRITE, 0, nil, windows.OPEN_EXISTING,
		windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(h)
	var ret uint32
	return windows.DeviceIoControl(h, windows.FSCTL_SET_REPARSE_POINT, &buf[0], uint32(len(buf)), nil, 0, &ret, nil)
}
