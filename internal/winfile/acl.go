//go:build windows

package winfile

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Access rights of files and directories (winnt.h) that x/sys/windows
// does not name.
const (
	fileAddFile         = 0x2  // FILE_ADD_FILE, FILE_WRITE_DATA on a file
	fileAddSubdirectory = 0x4  // FILE_ADD_SUBDIRECTORY, FILE_APPEND_DATA on a file
	fileDeleteChild     = 0x40 // FILE_DELETE_CHILD
	fileAllAccess       = windows.STANDARD_RIGHTS_REQUIRED | windows.SYNCHRONIZE | 0x1ff
)

// ACE types (winnt.h) beyond ACCESS_ALLOWED_ACE_TYPE and
// ACCESS_DENIED_ACE_TYPE.
const (
	accessDeniedObject         = 0x6
	accessAllowedCallback      = 0x9 // an ACCESS_ALLOWED_ACE with data after the SID
	accessDeniedCallback       = 0xa
	accessDeniedCallbackObject = 0xc
)

// Rights another user must not have on a directory of a trusted path:
// those that rename, remove or re-permit what is in it or it itself.
// Adding an entry is not among them (C:\ lets Authenticated Users make
// folders, as a sticky /tmp lets anyone), but for the directory a trusted
// file is in (TrustedDir's last).
const (
	ControlDir = windows.DELETE | fileDeleteChild | windows.WRITE_DAC | windows.WRITE_OWNER
	AddEntries = fileAddFile | fileAddSubdirectory
)

// Well-known SIDs that, like root on Linux, are not kept out in effect
// (backup, restore and take-ownership privileges): SYSTEM (S-1-5-18) and
// Administrators (S-1-5-32-544), and TrustedInstaller, the owner of
// Windows' own directories.
var (
	system, _           = windows.CreateWellKnownSid(windows.WinLocalSystemSid)
	administrators, _   = windows.CreateWellKnownSid(windows.WinBuiltinAdministratorsSid)
	trustedInstaller, _ = windows.StringToSid("S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464")
)

// privileged: sid is SYSTEM or Administrators.
func privileged(sid *windows.SID) bool {
	return sid.Equals(system) || sid.Equals(administrators)
}

// Private checks that h's DACL grants no access to anyone but user,
// SYSTEM and Administrators: the counterpart of "mode &077 == 0". A NULL
// DACL (or none) grants everyone everything. The handle needs
// READ_CONTROL. The error completes "PATH ...", e.g. "lets Everyone
// (S-1-1-0) have access 0x1200a9".
func Private(h windows.Handle, user *windows.SID) error {
	return othersMay(h, user, ^uint32(0))
}

// TrustedDir checks directory h as a directory on the way to a trusted
// file, the counterpart of trust.Dirs's rule: it is owned by user, SYSTEM,
// Administrators or TrustedInstaller, and its DACL grants no one else
// ControlDir, nor AddEntries when last (the directory the file is in,
// where another user could otherwise plant the file's name). The handle
// needs READ_CONTROL. The error completes "PATH ...".
func TrustedDir(h windows.Handle, user *windows.SID, last bool) error {
	owner, err := Owner(h)
	if err != nil {
		return fmt.Errorf("has an owner that cannot be read (%v)", err)
	}
	if !owner.Equals(user) && !privileged(owner) && !owner.Equals(trustedInstaller) {
		return fmt.Errorf("is owned by %s, who may change its DACL", account(owner))
	}
	mask := uint32(ControlDir)
	if last {
		mask |= AddEntries
	}
	return othersMay(h, user, mask)
}

// A GrantError is an ACE that gives another SID a right it must not have;
// its text completes "PATH ...".
type GrantError struct {
	SID       *windows.SID
	Mask      uint32 // the rights refused it has (generic ones mapped)
	Inherited bool   // the ACE is inherited from the parent (INHERITED_ACE)
}

func (e *GrantError) Error() string {
	return fmt.Sprintf("lets %s have access %#x (%s)", account(e.SID), e.Mask, rightNames(e.Mask))
}

// othersMay: h's DACL grants no one but user, SYSTEM and Administrators
// any right in mask, generic rights mapped to file rights (GENERIC_MAPPING
// of files). Inherit-only ACEs do not apply to h; denying ACEs are not
// counted (an allow after a deny for the same SID would be refused).
func othersMay(h windows.Handle, user *windows.SID, mask uint32) error {
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("has a DACL that cannot be read (%v)", err)
	}
	dacl, _, err := sd.DACL()
	if errors.Is(err, windows.ERROR_OBJECT_NOT_FOUND) || (err == nil && dacl == nil) {
		return errors.New("has no DACL, which lets everyone have every access")
	}
	if err != nil {
		return fmt.Errorf("has a DACL that cannot be read (%v)", err)
	}
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return fmt.Errorf("has a DACL that cannot be read (%v)", err)
		}
		if ace.Header.AceFlags&windows.INHERIT_ONLY_ACE != 0 {
			continue
		}
		switch ace.Header.AceType {
		case windows.ACCESS_DENIED_ACE_TYPE, accessDeniedObject, accessDeniedCallback, accessDeniedCallbackObject:
			continue
		case windows.ACCESS_ALLOWED_ACE_TYPE, accessAllowedCallback:
		default:
			return fmt.Errorf("has an ACE of type %d, which corral does not read (DACL %s)", ace.Header.AceType, sd)
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		if sid.Equals(user) || privileged(sid) {
			continue
		}
		if m := fileRights(uint32(ace.Mask)) & mask; m != 0 {
			sid, err := sid.Copy()
			if err != nil {
				return err
			}
			return &GrantError{SID: sid, Mask: m, Inherited: ace.Header.AceFlags&windows.INHERITED_ACE != 0}
		}
	}
	return nil
}

// fileRights maps m's generic rights to the file rights they stand for
// (FILE_GENERIC_READ, ..., "File Security and Access Rights").
func fileRights(m uint32) uint32 {
	for _, g := range [][2]uint32{
		{windows.GENERIC_READ, windows.FILE_GENERIC_READ},
		{windows.GENERIC_WRITE, windows.FILE_GENERIC_WRITE},
		{windows.GENERIC_EXECUTE, windows.FILE_GENERIC_EXECUTE},
		{windows.GENERIC_ALL, fileAllAccess},
	} {
		if m&g[0] != 0 {
			m = m&^g[0] | g[1]
		}
	}
	return m
}

// rightNames names the rights of m that matter here.
func rightNames(m uint32) string {
	var n []string
	for _, r := range []struct {
		bit  uint32
		name string
	}{
		{windows.FILE_READ_DATA, "read data or list"}, {fileAddFile, "write data or add files"},
		{fileAddSubdirectory, "append or add subdirectories"}, {fileDeleteChild, "delete children"},
		{windows.DELETE, "delete"}, {windows.WRITE_DAC, "change the DACL"}, {windows.WRITE_OWNER, "take ownership"},
	} {
		if m&r.bit != 0 {
			n = append(n, r.name)
		}
	}
	if len(n) == 0 {
		return "attributes or control"
	}
	return strings.Join(n, ", ")
}

// account names sid as "DOMAIN\name (S-...)", or the SID alone when it
// does not resolve.
func account(sid *windows.SID) string {
	name, domain, _, err := sid.LookupAccount("")
	switch {
	case err != nil || name == "":
		return sid.String()
	case domain != "":
		name = domain + `\` + name
	}
	return name + " (" + sid.String() + ")"
}
