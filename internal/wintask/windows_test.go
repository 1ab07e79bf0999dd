//go:build windows

package wintask

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
	"github.com/corral-sandbox/corral/internal/winfile"
)

func me(t *testing.T) *windows.SID {
	t.Helper()
	u, err := winfile.User()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// openRead opens path (no links) to read its attributes and security.
func openRead(t *testing.T, path string) windows.Handle {
	t.Helper()
	h, err := winfile.Open(path, windows.READ_CONTROL|windows.FILE_READ_ATTRIBUTES|windows.SYNCHRONIZE, windows.FILE_OPEN, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { windows.CloseHandle(h) })
	return h
}

// setDACL gives path the protected DACL of SDDL sddl (%s the caller's
// SID) with SetNamedSecurityInfo, and skips t as a Wine artifact when the
// DACL read back does not grant grantee a right in mask (Wine keeps a DACL
// only as Unix mode bits, see winfile's tests).
func setDACL(t *testing.T, path, sddl string, grantee *windows.SID, mask uint32) {
	t.Helper()
	sd, err := windows.SecurityDescriptorFromString(strings.ReplaceAll(sddl, "%s", me(t).String()))
	if err != nil {
		t.Fatal(err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil); err != nil {
		t.Fatal(err)
	}
	got, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err := got.DACL(); err == nil && d != nil {
		for i := range uint32(d.AceCount) {
			var ace *windows.ACCESS_ALLOWED_ACE
			if windows.GetAce(d, i, &ace) == nil && ace.Header.AceType == windows.ACCESS_ALLOWED_ACE_TYPE &&
				(*windows.SID)(unsafe.Pointer(&ace.SidStart)).Equals(grantee) && uint32(ace.Mask)&mask != 0 {
				return
			}
		}
	}
	wine.SkipArtifact(t, "Wine keeps a DACL only as Unix mode bits: "+path+" set to "+sddl+" reads back as "+got.String())
	t.Fatalf("%s: the DACL set reads back as %s", path, got)
}

var everyone, _ = windows.CreateWellKnownSid(windows.WinWorldSid)

// Write makes a file the caller's alone (winfile.Private) holding the
// data, and replacing one it owns resets a DACL that let others in.
func TestWritePrivate(t *testing.T) {
	path := Path(t.TempDir(), "gw")
	b := testXML(t)
	if err := Write(path, b); err != nil {
		t.Fatal(err)
	}
	h := openRead(t, path)
	if err := winfile.CheckFile(h, me(t)); err != nil {
		t.Errorf("the file Write made %v", err)
	}
	artifact := privateOrWine(t, h)
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, b) {
		t.Errorf("the file holds %d bytes, %v; want the %d written", len(got), err, len(b))
	}

	// An existing file of the caller's that Everyone may write, longer
	// than the new content.
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 3*len(b)), 0o600); err != nil {
		t.Fatal(err)
	}
	setDACL(t, path, "D:P(A;;FA;;;%s)(A;;FA;;;WD)", everyone, windows.FILE_WRITE_DATA)
	if err := Write(path, b); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
		t.Errorf("after Write over a longer file it holds %d bytes, want %d", len(got), len(b))
	}
	if a := privateOrWine(t, openRead(t, path)); a != "" {
		artifact = a
	}
	if artifact != "" {
		wine.SkipArtifact(t, artifact)
	}
}

// privateOrWine fails t unless h's DACL grants no one else any access
// (winfile.Private), and reports a Wine artifact instead when the DACL
// lets Everyone read only: Wine keeps a DACL only as Unix mode bits, and
// its SetSecurityInfo of an owner-only DACL reads back with Everyone's
// read and execute (0x1200a9). No one else may write or replace the file
// under Wine either (winfile.TrustedDir's rule on the file).
func privateOrWine(t *testing.T, h windows.Handle) (artifact string) {
	t.Helper()
	if err := winfile.TrustedDir(h, me(t), true); err != nil {
		t.Errorf("others may write or replace the file: it %v", err)
	}
	err := winfile.Private(h, me(t))
	var ge *winfile.GrantError
	if wine.Detected() && errors.As(err, &ge) && ge.SID.Equals(everyone) && ge.Mask&^(windows.FILE_GENERIC_READ|windows.FILE_GENERIC_EXECUTE) == 0 {
		return "SetSecurityInfo of an owner-only DACL reads back with Everyone's read: the file " + err.Error()
	}
	if err != nil {
		t.Errorf("the file Write made %v", err)
	}
	return ""
}

// junction makes link a junction to target, skipping t as a Wine
// artifact where FSCTL_SET_REPARSE_POINT is not supported.
func junction(t *testing.T, link, target string) {
	t.Helper()
	if err := winfile.MakeJunction(link, target); err != nil {
		if errors.Is(err, windows.ERROR_NOT_SUPPORTED) {
			wine.SkipArtifact(t, "FSCTL_SET_REPARSE_POINT is not supported (no junctions)")
		}
		t.Fatal(err)
	}
}

// Write refuses a junction at the path and one on the way to it, and
// writes nothing where they point.
func TestWriteRefusesJunction(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	at := Path(dir, "gw")
	junction(t, at, target)
	if err := Write(at, testXML(t)); err == nil || !strings.Contains(err.Error(), "junction") {
		t.Errorf("Write at a junction = %v, want it refused", err)
	}
	via := filepath.Join(dir, "via")
	junction(t, via, target)
	if err := Write(Path(via, "gw"), testXML(t)); err == nil || !strings.Contains(err.Error(), "junction") {
		t.Errorf("Write through a junction = %v, want it refused", err)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("the junctions' target holds %v", ents)
	}
}

// Write refuses a symlink at the path (where symlinks can be made).
func TestWriteRefusesSymlink(t *testing.T) {
	wine.SkipArtifact(t, wine.NoSymlinks)
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := Path(dir, "gw")
	if err := os.Symlink(target, at); err != nil {
		t.Skipf("no symlink (SeCreateSymbolicLinkPrivilege or developer mode needed): %v", err)
	}
	if err := Write(at, testXML(t)); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Write at a symlink = %v, want it refused", err)
	}
	if got, _ := os.ReadFile(target); string(got) != "mine" {
		t.Errorf("the symlink's target now holds %q", got)
	}
}

// about is the warnings of w about path itself (not its directories).
func about(w []string, path string) []string {
	var r []string
	for _, s := range w {
		if strings.HasPrefix(s, path+" (") {
			r = append(r, s)
		}
	}
	return r
}

// privateFiles writes a task definition (Write) and a stand-in program
// made private the same way, in a directory of the test's.
func privateFiles(t *testing.T) (def, exe string) {
	t.Helper()
	dir := t.TempDir()
	def, exe = Path(dir, "gw"), filepath.Join(dir, "corral.exe")
	for _, p := range []string{def, exe} {
		if err := Write(p, testXML(t)); err != nil {
			t.Fatal(err)
		}
	}
	return def, exe
}

// Check is quiet about private files.
func TestCheckPrivate(t *testing.T) {
	def, exe := privateFiles(t)
	w := Check(def, exe, testSID)
	if a := append(about(w, def), about(w, exe)...); len(a) != 0 {
		t.Errorf("Check of private files = %q, want no warning about them", a)
	}
	t.Logf("warnings about the directories above: %q", w)
}

// Check warns about a program whose DACL grants Everyone write.
func TestCheckEveryoneWrites(t *testing.T) {
	def, exe := privateFiles(t)
	setDACL(t, exe, "D:P(A;;FA;;;%s)(A;;0x120116;;;WD)", everyone, windows.FILE_WRITE_DATA)
	a := about(Check(def, exe, testSID), exe)
	if len(a) != 1 || !strings.Contains(a[0], "S-1-1-0") || !strings.Contains(a[0], "write data") {
		t.Errorf("Check of a program Everyone may write = %q, want one warning naming Everyone", a)
	}
}

// Check names the agent user when it is the one granted write.
func TestCheckAgentWrites(t *testing.T) {
	def, exe := privateFiles(t)
	agent, err := windows.StringToSid(testSID)
	if err != nil {
		t.Fatal(err)
	}
	setDACL(t, exe, "D:P(A;;FA;;;%s)(A;;FW;;;"+testSID+")", agent, windows.FILE_WRITE_DATA)
	a := about(Check(def, exe, testSID), exe)
	if len(a) != 1 || !strings.Contains(a[0], "agent user could") {
		t.Errorf("Check of a program the agent may write = %q, want one warning naming the agent user", a)
	}
}

// Check warns about a missing file.
func TestCheckMissing(t *testing.T) {
	def, exe := privateFiles(t)
	missing := filepath.Join(filepath.Dir(exe), "missing.exe")
	if a := about(Check(def, missing, testSID), missing); len(a) != 1 || !strings.Contains(a[0], "does not exist") {
		t.Errorf("Check of a missing program = %q", a)
	}
}

// Check warns about a junction on the way to a file.
func TestCheckJunction(t *testing.T) {
	def, exe := privateFiles(t)
	via := filepath.Join(t.TempDir(), "via")
	junction(t, via, filepath.Dir(exe))
	viaExe := filepath.Join(via, "corral.exe")
	if a := about(Check(def, viaExe, testSID), viaExe); len(a) != 1 || !strings.Contains(a[0], "junction") {
		t.Errorf("Check of a program through a junction = %q", a)
	}
}
