//go:build windows

package winfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/windows"
)

const (
	shareAll = windows.FILE_SHARE_READ | windows.FILE_SHARE_WRITE | windows.FILE_SHARE_DELETE
	// nameSurrogate is the reparse tag bit of links (IsReparseTagNameSurrogate).
	nameSurrogate = 0x20000000
	// fileCreated is IO_STATUS_BLOCK.Information after NtCreateFile made the file.
	fileCreated = 2
)

// ErrNoName: the path ends in its volume part (C:\, NUL), so it names no
// file in a directory.
var ErrNoName = errors.New("names no file in a directory")

// ErrDevice: the path is in the device namespace (\\.\ or \\?\, e.g.
// \\.\pipe\x): no file of a file system, and opening it may connect to
// whoever serves the name.
var ErrDevice = errors.New("is a device path, not a file")

// IsDevicePath reports whether path is in the device namespace (\\.\ or
// \\?\, either separator): ErrDevice's paths.
func IsDevicePath(path string) bool {
	p := strings.ReplaceAll(path, "/", `\`)
	return strings.HasPrefix(p, `\\.\`) || strings.HasPrefix(p, `\\?\`)
}

// ErrStream: the path's last component names an alternate data stream
// (NAME:STREAM).
var ErrStream = errors.New("names an alternate data stream")

// A ComponentError is a component of a path that a walk does not go
// through: a file where a directory was needed, or a link.
type ComponentError struct {
	Dir    string // the component, with the path's volume before it
	NotDir bool   // it is not a directory
	Tag    uint32 // else its reparse tag, a name surrogate
}

func (e *ComponentError) Error() string {
	if e.NotDir {
		return e.Dir + " is not a directory"
	}
	return e.Dir + " is " + ReparseKind(e.Tag)
}

// A Dir is a directory a Walk went through, given to Walk.Check.
type Dir struct {
	Path    string         // with the volume part, as walked
	Handle  windows.Handle // open with FILE_READ_ATTRIBUTES and READ_CONTROL
	Created bool           // the walk made it (Walk.Mkdir)
	Last    bool           // the directory Open's file is in, or OpenDir's directory
}

// A Walk is how Open and OpenDir go down a path. Its zero value walks
// existing directories and checks nothing but links.
type Walk struct {
	// Mkdir, when not nil, is the security descriptor a missing
	// directory on the way is made with; when nil a missing one is an
	// error (ERROR_PATH_NOT_FOUND).
	Mkdir *windows.SECURITY_DESCRIPTOR
	// Check, when not nil, is called for each directory, the volume root
	// first, on its handle before anything is opened in it; an error stops
	// the walk and is returned as is.
	Check func(Dir) error
}

// Open opens path with the zero Walk: Walk{}.Open.
func Open(path string, access, disposition, options uint32, sd *windows.SECURITY_DESCRIPTOR) (windows.Handle, error) {
	return Walk{}.Open(path, access, disposition, options, sd)
}

// Open opens path (NtCreateFile access, disposition, create options; sd
// the security descriptor of a file it makes) without following any link:
//
//   - The path is made absolute (GetFullPathName) and walked from its
//     volume root one component at a time: each directory is opened
//     relative to its parent's handle (NtCreateFile RootDirectory) with
//     FILE_OPEN_REPARSE_POINT, so a link is opened, never followed, and is
//     refused (a *ComponentError) if its reparse tag is a name surrogate (a
//     symlink, a junction or a volume mount point;
//     IsReparseTagNameSurrogate). Swapping a component for a link after it
//     was opened does not redirect the walk: the counterpart of openat2
//     RESOLVE_NO_SYMLINKS. Reparse points that redirect no name (a
//     OneDrive folder's cloud tag) are walked.
//   - The last component is opened the same way, relative to its
//     directory's handle, with FILE_OPEN_REPARSE_POINT: a link there is
//     opened itself (CheckFile refuses it). A failure is a Win32 error in
//     an *os.PathError, but STATUS_FILE_IS_A_DIRECTORY and
//     STATUS_NOT_A_DIRECTORY as they are.
//
// ErrNoName, ErrDevice and ErrStream refuse a path that names no file in
// a directory, one in the device namespace, or an alternate data stream. The handle is synchronous and not
// inherited by children; it shares read, write and delete.
//
// Limits: the volume part (drive letter, UNC share) is resolved by the
// object manager, so a subst or mapped drive is followed, as a mount is on
// Linux. What changes after a component was opened changes nothing the
// open refers to. Under Wine a Unix symlink in the prefix is followed by
// Wine itself, invisibly to any Windows call.
func (w Walk) Open(path string, access, disposition, options uint32, sd *windows.SECURITY_DESCRIPTOR) (windows.Handle, error) {
	vol, parts, err := split(path)
	if err != nil {
		return windows.InvalidHandle, err
	}
	name := parts[len(parts)-1]
	if strings.ContainsRune(name, ':') {
		return windows.InvalidHandle, ErrStream
	}
	dir, err := w.walk(vol, parts[:len(parts)-1], 0)
	if err != nil {
		return windows.InvalidHandle, err
	}
	defer windows.CloseHandle(dir)
	h, _, err := openAt(dir, name, access, disposition, options, sd)
	return h, err
}

// OpenDir opens directory path as Open walks, the directory itself a
// component of the walk (made with Mkdir when missing, given to Check with
// Last set, refused when a link), with access added to FILE_READ_ATTRIBUTES
// and SYNCHRONIZE (and READ_CONTROL when Check is set).
func (w Walk) OpenDir(path string, access uint32) (windows.Handle, error) {
	vol, parts, err := split(path)
	if err != nil {
		return windows.InvalidHandle, err
	}
	return w.walk(vol, parts, access)
}

// split makes path absolute and splits it into its volume and components.
func split(path string) (vol string, parts []string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	if IsDevicePath(abs) {
		return "", nil, ErrDevice
	}
	vol = filepath.VolumeName(abs)
	rest := strings.Trim(abs[len(vol):], `\`)
	if vol == "" || rest == "" {
		return "", nil, ErrNoName
	}
	return vol, strings.Split(rest, `\`), nil
}

// walk opens the directory vol\parts..., each component relative to the
// last, the last with extra access added; see Open.
func (w Walk) walk(vol string, parts []string, extra uint32) (windows.Handle, error) {
	access := uint32(windows.FILE_READ_ATTRIBUTES | windows.SYNCHRONIZE)
	if w.Check != nil {
		access |= windows.READ_CONTROL
	}
	root, err := windows.UTF16PtrFromString(vol + `\`)
	if err != nil {
		return windows.InvalidHandle, err
	}
	rootAccess := access
	if len(parts) == 0 {
		rootAccess |= extra
	}
	dir, err := windows.CreateFile(root, rootAccess, shareAll, nil,
		windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return windows.InvalidHandle, fmt.Errorf("%s: %w", vol, err)
	}
	if w.Check != nil {
		if err := w.Check(Dir{Path: vol + `\`, Handle: dir, Last: len(parts) == 0}); err != nil {
			windows.CloseHandle(dir)
			return windows.InvalidHandle, err
		}
	}
	disposition := uint32(windows.FILE_OPEN)
	if w.Mkdir != nil {
		disposition = windows.FILE_OPEN_IF
	}
	for i, c := range parts {
		a := access
		if i == len(parts)-1 {
			a |= extra
		}
		next, info, err := openAt(dir, c, a, disposition, windows.FILE_DIRECTORY_FILE, w.Mkdir)
		windows.CloseHandle(dir)
		at := vol + `\` + strings.Join(parts[:i+1], `\`)
		if errors.Is(err, windows.STATUS_NOT_A_DIRECTORY) {
			return windows.InvalidHandle, &ComponentError{Dir: at, NotDir: true}
		}
		if err != nil {
			return windows.InvalidHandle, err
		}
		dir = next
		attrs, tag, err := attrTag(dir)
		if err != nil {
			windows.CloseHandle(dir)
			return windows.InvalidHandle, fmt.Errorf("stat %s: %w", at, err)
		}
		if attrs&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 && tag&nameSurrogate != 0 {
			windows.CloseHandle(dir)
			return windows.InvalidHandle, &ComponentError{Dir: at, Tag: tag}
		}
		if w.Check != nil {
			if err := w.Check(Dir{Path: at, Handle: dir, Created: info == fileCreated, Last: i == len(parts)-1}); err != nil {
				windows.CloseHandle(dir)
				return windows.InvalidHandle, err
			}
		}
	}
	return dir, nil
}

// openAt opens name, one path component, relative to the directory dir
// (NtCreateFile), never following a reparse point, synchronous, not
// inherited by children; info is the IO_STATUS_BLOCK's (FILE_CREATED,
// FILE_OPENED). A failure is a Win32 error in an *os.PathError, but
// STATUS_FILE_IS_A_DIRECTORY and STATUS_NOT_A_DIRECTORY as they are.
func openAt(dir windows.Handle, name string, access, disposition, options uint32, sd *windows.SECURITY_DESCRIPTOR) (windows.Handle, uintptr, error) {
	n, err := windows.NewNTUnicodeString(name)
	if err != nil {
		return windows.InvalidHandle, 0, err
	}
	oa := windows.OBJECT_ATTRIBUTES{
		Length:             uint32(unsafe.Sizeof(windows.OBJECT_ATTRIBUTES{})),
		RootDirectory:      dir,
		ObjectName:         n,
		Attributes:         windows.OBJ_CASE_INSENSITIVE,
		SecurityDescriptor: sd,
	}
	var h windows.Handle
	var iosb windows.IO_STATUS_BLOCK
	err = windows.NtCreateFile(&h, access, &oa, &iosb, nil, windows.FILE_ATTRIBUTE_NORMAL, shareAll, disposition,
		options|windows.FILE_OPEN_REPARSE_POINT|windows.FILE_SYNCHRONOUS_IO_NONALERT, 0, 0)
	if err != nil {
		if st, ok := err.(windows.NTStatus); ok && st != windows.STATUS_FILE_IS_A_DIRECTORY && st != windows.STATUS_NOT_A_DIRECTORY {
			err = &os.PathError{Op: "open", Path: name, Err: st.Errno()}
		}
		return windows.InvalidHandle, 0, err
	}
	return h, iosb.Information, nil
}

// attrTag returns h's attributes and reparse tag (FILE_ATTRIBUTE_TAG_INFO).
func attrTag(h windows.Handle) (attrs, tag uint32, err error) {
	var ti struct{ FileAttributes, ReparseTag uint32 }
	err = windows.GetFileInformationByHandleEx(h, windows.FileAttributeTagInfo, (*byte)(unsafe.Pointer(&ti)), uint32(unsafe.Sizeof(ti)))
	return ti.FileAttributes, ti.ReparseTag, err
}

// ReparseKind names a reparse tag: "a symlink", "a junction or mount
// point", or "a reparse point (tag 0x...)".
func ReparseKind(tag uint32) string {
	switch tag {
	case windows.IO_REPARSE_TAG_SYMLINK:
		return "a symlink"
	case windows.IO_REPARSE_TAG_MOUNT_POINT:
		return "a junction or mount point"
	}
	return fmt.Sprintf("a reparse point (tag %#x)", tag)
}

// User is the user SID of the process token: the owner corral gives what
// it makes and requires of what it trusts.
func User() (*windows.SID, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, err
	}
	return u.User.Sid.Copy()
}

// OwnerOnly is the security descriptor of a new private file, the
// counterpart of mode 0600: owned by user (set explicitly: an elevated
// token's default owner is Administrators) and a protected DACL (no
// inherited ACEs) with one ACE, user's full control ("Security Descriptor
// String Format"). SYSTEM and Administrators get no ACE: like root on
// Linux they are not kept out in effect (SeBackupPrivilege,
// SeTakeOwnershipPrivilege), and an ACE would only widen who reads the
// file without a privilege.
func OwnerOnly(user *windows.SID) (*windows.SECURITY_DESCRIPTOR, error) {
	s := user.String()
	return windows.SecurityDescriptorFromString("O:" + s + "D:P(A;;FA;;;" + s + ")")
}

// OwnerOnlyDir is OwnerOnly for a directory, the counterpart of mode
// 0700: its one ACE is inherited by what is made inside (OICI).
func OwnerOnlyDir(user *windows.SID) (*windows.SECURITY_DESCRIPTOR, error) {
	s := user.String()
	return windows.SecurityDescriptorFromString("O:" + s + "D:P(A;OICI;FA;;;" + s + ")")
}

// MakePrivateDir makes directory path the caller's alone, the counterpart
// of mkdir -p and chmod 0700: path is walked as Open walks (no links), a
// missing directory on the way is made with OwnerOnlyDir, and path itself,
// made or found, must be owned by the caller, SYSTEM or Administrators
// (an elevated token's default owner, which os.MkdirAll gives: "Default
// owner", Microsoft Learn), and gets the caller as owner and
// OwnerOnlyDir's protected DACL (SetSecurityInfo). A directory another
// user owns is refused: its owner could change its DACL again.
func MakePrivateDir(path string) error {
	user, err := User()
	if err != nil {
		return fmt.Errorf("%s: the caller's SID: %w", path, err)
	}
	sd, err := OwnerOnlyDir(user)
	if err != nil {
		return err
	}
	h, err := Walk{Mkdir: sd}.OpenDir(path, windows.READ_CONTROL|windows.WRITE_DAC|windows.WRITE_OWNER)
	var ce *ComponentError
	switch {
	case errors.As(err, &ce):
		return fmt.Errorf("%s: %v: give the directory's real path", path, ce)
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	}
	defer windows.CloseHandle(h)
	if owner, err := Owner(h); err != nil || (!owner.Equals(user) && !privileged(owner)) {
		if err == nil {
			err = fmt.Errorf("is owned by %s, not by the caller (%s)", account(owner), user)
		}
		return fmt.Errorf("%s %v, who could change it: use a directory of your own", path, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	if err := windows.SetSecurityInfo(h, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, user, nil, dacl, nil); err != nil {
		return fmt.Errorf("%s: set its DACL: %w", path, err)
	}
	return nil
}

// CheckFile checks an opened file as corral trusts one: a disk file
// (GetFileType), not a directory nor a reparse point of any kind, with one
// link (NumberOfLinks), owned by user (its owner SID, GetSecurityInfo;
// the handle needs READ_CONTROL). The error completes "PATH ...", e.g.
// "has 2 hard links".
func CheckFile(h windows.Handle, user *windows.SID) error {
	if t, err := windows.GetFileType(h); err != nil || t != windows.FILE_TYPE_DISK {
		return errors.New("is not a regular file (a device or a pipe)")
	}
	attrs, tag, err := attrTag(h)
	if err != nil {
		return fmt.Errorf("cannot be inspected (%v)", err)
	}
	switch {
	case attrs&windows.FILE_ATTRIBUTE_DIRECTORY != 0:
		return errors.New("is not a regular file (a directory)")
	case attrs&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0:
		return errors.New("is " + ReparseKind(tag))
	}
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
		return fmt.Errorf("cannot be inspected (%v)", err)
	}
	if fi.NumberOfLinks != 1 {
		return fmt.Errorf("has %d hard links", fi.NumberOfLinks)
	}
	return checkOwner(h, user)
}

// checkOwner: h's owner is user; the error completes "PATH ...".
func checkOwner(h windows.Handle, user *windows.SID) error {
	owner, err := Owner(h)
	if err != nil {
		return fmt.Errorf("has an owner that cannot be read (%v)", err)
	}
	if !owner.Equals(user) {
		return fmt.Errorf("is owned by %s, not by the caller (%s)", owner, user)
	}
	return nil
}

// Owner is h's owner SID (GetSecurityInfo; the handle needs READ_CONTROL).
func Owner(h windows.Handle) (*windows.SID, error) {
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return nil, err
	}
	owner, _, err := sd.Owner()
	if err == nil && owner == nil {
		err = errors.New("no owner")
	}
	if err != nil {
		return nil, err
	}
	return owner.Copy()
}
