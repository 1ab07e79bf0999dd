package mxc

import (
	"testing"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
	"github.com/corral-sandbox/corral/internal/winfile"
)

// checkPrivate fails t unless path is the caller's alone: its DACL has no
// ACE for anyone but the caller's user, SYSTEM and Administrators
// (winfile.Private).
func checkPrivate(t *testing.T, path string) {
	t.Helper()
	user, err := winfile.User()
	if err != nil {
		t.Fatal(err)
	}
	h, err := winfile.Open(path, windows.READ_CONTROL, windows.FILE_OPEN, 0, nil) // a file or a directory
	if err != nil {
		t.Fatal(err)
	}
	defer windows.CloseHandle(h)
	if err := winfile.Private(h, user); err != nil {
		wine.SkipArtifact(t, "SetSecurityInfo succeeds without changing a file's DACL, which reads back made from its Unix mode bits")
		sd, _ := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
		t.Errorf("%s %v (%s)", path, err, sd)
	}
}
