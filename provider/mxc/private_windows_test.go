package mxc

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

// checkPrivate fails t unless path is the caller's alone: its DACL has no
// ACE for anyone but the caller's user and SYSTEM.
func checkPrivate(t *testing.T, path string) {
	t.Helper()
	wine.SkipArtifact(t, "SetNamedSecurityInfo succeeds without changing a file's DACL, which reads back made from its Unix mode bits")
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	dacl, _, err := sd.DACL()
	if err != nil || dacl == nil {
		t.Fatalf("%s: no DACL (everyone has access): %v", path, err)
	}
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		t.Fatal(err)
	}
	system, _ := windows.CreateWellKnownSid(windows.WinLocalSystemSid)
	for i := uint32(0); i < uint32(dacl.AceCount); i++ {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			t.Fatal(err)
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		if !sid.Equals(u.User.Sid) && !sid.Equals(system) {
			t.Errorf("%s: %s", path, sd)
			return
		}
	}
}
