//go:build windows

package wintask

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winfile"
)

// Write stores xml (Task.XML's bytes) at path, the caller's alone:
//
//   - path is walked from its volume root without following any link
//     (winfile.Open): a symlink, junction or mount point on the way is
//     refused, and at path itself a symlink is opened as itself and
//     refused (winfile.CheckFile), a junction or directory refused as a
//     directory (STATUS_FILE_IS_A_DIRECTORY);
//   - a missing file is made with winfile.OwnerOnly's security
//     descriptor (owned by the caller, a protected DACL with one ACE, the
//     caller's full control; SYSTEM and Administrators get none, as
//     winfile explains: they are not kept out in effect);
//   - an existing one must be a disk file with one link owned by the
//     caller (winfile.CheckFile), checked on the handle it is written
//     through; its DACL is set to OwnerOnly's (protected) before it is
//     truncated and rewritten in place, then flushed.
//
// Errors: xml not from Task.XML (no UTF-16LE byte-order mark), a refusal
// above, or the open, write or flush failing. A failed write may leave the
// file truncated; Register would then fail and Write can be run again.
func Write(path string, xml []byte) error {
	if err := checkData(xml); err != nil {
		return fmt.Errorf("%s: the data %w", path, err)
	}
	user, err := winfile.User()
	if err != nil {
		return fmt.Errorf("%s: the caller's SID: %w", path, err)
	}
	sd, err := winfile.OwnerOnly(user)
	if err != nil {
		return err
	}
	h, err := winfile.Open(path, windows.FILE_GENERIC_READ|windows.FILE_GENERIC_WRITE|windows.WRITE_DAC,
		windows.FILE_OPEN_IF, windows.FILE_NON_DIRECTORY_FILE, sd)
	var ce *winfile.ComponentError
	switch {
	case errors.As(err, &ce):
		return fmt.Errorf("%s: %v: refusing to write a task definition through a link", path, ce)
	case errors.Is(err, windows.STATUS_FILE_IS_A_DIRECTORY):
		return fmt.Errorf("%s is a directory or a junction: refusing to write a task definition there", path)
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(h), path)
	defer f.Close()
	if err := winfile.CheckFile(h, user); err != nil {
		return fmt.Errorf("%s %v: refusing to replace it", path, err)
	}
	if !private(h, user) {
		dacl, _, err := sd.DACL()
		if err != nil {
			return err
		}
		if err := windows.SetSecurityInfo(h, windows.SE_FILE_OBJECT,
			windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil); err != nil {
			return fmt.Errorf("%s: set its DACL: %w", path, err)
		}
	}
	return rewrite(f, xml)
}

// private: h's DACL is protected (SE_DACL_PROTECTED: no ACE a parent
// directory's inheritance could add later) and grants no one but user,
// SYSTEM and Administrators any access (winfile.Private).
func private(h windows.Handle, user *windows.SID) bool {
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return false
	}
	control, _, err := sd.Control()
	return err == nil && control&windows.SE_DACL_PROTECTED != 0 && winfile.Private(h, user) == nil
}
