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
	"github.com/corral-sandbox/corral/internal/winfile"
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

// A junction (a directory mount point) anywhere on the path is refused.
// Junctions need no privilege, so this runs for every Windows user.
func TestOpenRefusesJunction(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	junction := filepath.Join(dir, "junction")
	if err := winfile.MakeJunction(junction, target); err != nil {
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
