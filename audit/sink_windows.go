//go:build windows

package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/windows"
)

// openLog opens path for appending, creating it with an owner-only DACL
// (the counterpart of mode 0600). Every check is made on a handle, so no
// name is looked up twice:
//
//   - The path is made absolute (GetFullPathName) and walked from its
//     volume root one component at a time: each directory is opened
//     relative to its parent's handle (NtCreateFile RootDirectory) with
//     FILE_OPEN_REPARSE_POINT, so a link is opened, never followed, and is
//     refused if its reparse tag is a name surrogate (a symlink, a junction
//     or a volume mount point; IsReparseTagNameSurrogate). Swapping a
//     component for a link after it was opened does not redirect the walk:
//     the counterpart of openat2 RESOLVE_NO_SYMLINKS. Reparse points that
//     redirect no name (a OneDrive folder's cloud tag) are walked.
//   - The file is opened the same way (FILE_OPEN_IF relative to its
//     directory's handle, FILE_APPEND_DATA without FILE_WRITE_DATA, so
//     every write appends) and must be a disk file (GetFileType), not a
//     directory nor a reparse point of any kind, with one link
//     (NumberOfLinks), owned by the caller (its owner SID, GetSecurityInfo,
//     is the process token's user SID), and not an alternate data stream.
//
// Limits: the volume part (drive letter, UNC share) is resolved by the
// object manager, so a subst or mapped drive is followed, as a mount is on
// Linux. What changes after a component was opened (a link put in its
// place, a hard link added to the file after the check) changes nothing
// the open refers to. Under Wine a Unix symlink in the prefix is followed
// by Wine itself, invisibly to any Windows call. The DACL of an existing file
// is neither checked nor changed (as the mode is not on Linux). The file
// is shared for delete (rename while open, which rotation needs), so
// whoever may delete in its directory can rename it away, as on Linux.
func openLog(path string) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	vol := filepath.VolumeName(abs)
	rest := strings.TrimPrefix(abs[len(vol):], `\`)
	if vol == "" || rest == "" {
		return nil, fmt.Errorf("audit: %s is not a regular file; refusing to append to it", path)
	}
	parts := strings.Split(rest, `\`)
	name := parts[len(parts)-1]
	if strings.ContainsRune(name, ':') {
		return nil, fmt.Errorf("audit: %s names an alternate data stream; refusing to append to it", path)
	}

	root, err := windows.UTF16PtrFromString(vol + `\`)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	dir, err := windows.CreateFile(root, windows.FILE_READ_ATTRIBUTES|windows.SYNCHRONIZE, shareAll, nil,
		windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %s: %w", path, vol, err)
	}
	for i, c := range parts[:len(parts)-1] {
		next, err := openAt(dir, c, windows.FILE_READ_ATTRIBUTES|windows.SYNCHRONIZE,
			windows.FILE_OPEN, windows.FILE_DIRECTORY_FILE, nil)
		windows.CloseHandle(dir)
		if errors.Is(err, windows.STATUS_NOT_A_DIRECTORY) {
			return nil, fmt.Errorf("audit: open %s: %s is not a directory", path, vol+`\`+strings.Join(parts[:i+1], `\`))
		}
		if err != nil {
			return nil, fmt.Errorf("audit: open %s: %w", path, err)
		}
		dir = next
		attrs, tag, err := attrTag(dir)
		if err != nil {
			windows.CloseHandle(dir)
			return nil, fmt.Errorf("audit: stat %s: %w", path, err)
		}
		if attrs&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 && tag&nameSurrogate != 0 {
			windows.CloseHandle(dir)
			return nil, fmt.Errorf("audit: open %s: %s is %s; give the real path",
				path, vol+`\`+strings.Join(parts[:i+1], `\`), reparseKind(tag))
		}
	}

	user, err := callerSID()
	if err != nil {
		windows.CloseHandle(dir)
		return nil, fmt.Errorf("audit: open %s: the caller's SID: %w", path, err)
	}
	sd, err := ownerOnly(user)
	if err != nil {
		windows.CloseHandle(dir)
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	h, err := openAt(dir, name,
		windows.FILE_APPEND_DATA|windows.FILE_READ_ATTRIBUTES|windows.READ_CONTROL|windows.SYNCHRONIZE,
		windows.FILE_OPEN_IF, windows.FILE_NON_DIRECTORY_FILE, sd)
	windows.CloseHandle(dir)
	if errors.Is(err, windows.STATUS_FILE_IS_A_DIRECTORY) {
		return nil, fmt.Errorf("audit: %s is not a regular file (a directory); refusing to append to it", path)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	if err := checkLog(h, user); err != nil {
		windows.CloseHandle(h)
		return nil, fmt.Errorf("audit: %s %v; refusing to append to it", path, err)
	}
	return os.NewFile(uintptr(h), path), nil
}

const (
	shareAll = windows.FILE_SHARE_READ | windows.FILE_SHARE_WRITE | windows.FILE_SHARE_DELETE
	// nameSurrogate is the reparse tag bit of links (IsReparseTagNameSurrogate).
	nameSurrogate = 0x20000000
)

// callerSID is the user SID of the process token: the owner openLog gives
// a new file and requires of an existing one. A variable for tests.
var callerSID = func() (*windows.SID, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, err
	}
	return u.User.Sid.Copy()
}

// ownerOnly is the security descriptor of a new log: owned by user (set
// explicitly: an elevated token's default owner is Administrators) and a
// protected DACL (no inherited ACEs) with one ACE, user's full control.
// SYSTEM and Administrators get no ACE: like root on Linux they are not
// kept out in effect (SeBackupPrivilege, SeTakeOwnershipPrivilege), and an
// ACE would only widen who reads the log without a privilege.
func ownerOnly(user *windows.SID) (*windows.SECURITY_DESCRIPTOR, error) {
	s := user.String()
	return windows.SecurityDescriptorFromString("O:" + s + "D:P(A;;FA;;;" + s + ")")
}

// openAt opens name, one path component, relative to the directory dir
// (NtCreateFile), never following a reparse point, synchronous, not
// inherited by children. A failure is a Win32 error in an *os.PathError,
// but STATUS_FILE_IS_A_DIRECTORY and STATUS_NOT_A_DIRECTORY as they are.
func openAt(dir windows.Handle, name string, access, disposition, options uint32, sd *windows.SECURITY_DESCRIPTOR) (windows.Handle, error) {
	n, err := windows.NewNTUnicodeString(name)
	if err != nil {
		return windows.InvalidHandle, err
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
		return windows.InvalidHandle, err
	}
	return h, nil
}

// attrTag returns h's attributes and reparse tag (FILE_ATTRIBUTE_TAG_INFO).
func attrTag(h windows.Handle) (attrs, tag uint32, err error) {
	var ti struct{ FileAttributes, ReparseTag uint32 }
	err = windows.GetFileInformationByHandleEx(h, windows.FileAttributeTagInfo, (*byte)(unsafe.Pointer(&ti)), uint32(unsafe.Sizeof(ti)))
	return ti.FileAttributes, ti.ReparseTag, err
}

func reparseKind(tag uint32) string {
	switch tag {
	case windows.IO_REPARSE_TAG_SYMLINK:
		return "a symlink"
	case windows.IO_REPARSE_TAG_MOUNT_POINT:
		return "a junction or mount point"
	}
	return fmt.Sprintf("a reparse point (tag %#x)", tag)
}

// checkLog is openLog's check of the opened file; the error completes
// "audit: PATH ...".
func checkLog(h windows.Handle, user *windows.SID) error {
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
		return errors.New("is " + reparseKind(tag))
	}
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
		return fmt.Errorf("cannot be inspected (%v)", err)
	}
	if fi.NumberOfLinks != 1 {
		return fmt.Errorf("has %d hard links", fi.NumberOfLinks)
	}
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("has an owner that cannot be read (%v)", err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return fmt.Errorf("has an owner that cannot be read (%v)", err)
	}
	if !owner.Equals(user) {
		return fmt.Errorf("is owned by %s, not by the caller (%s)", owner, user)
	}
	return nil
}

// lockOffset is the one byte Emit locks (LockFileEx, exclusive, waiting):
// the last a file offset can name, far past any data. A Windows lock is
// mandatory for the bytes it covers, so locking data would make a writer
// that does not lock (a tool appending to the log) fail; a byte no write
// reaches only orders the sinks, of this process and of others, which all
// lock it.
const lockOffset = 1<<63 - 1

// lockFile takes or releases the exclusive lock on lockOffset.
func lockFile(f *os.File, lock bool) error {
	ol := windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
	h := windows.Handle(f.Fd())
	if lock {
		return windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, &ol)
	}
	return windows.UnlockFileEx(h, 0, 1, 0, &ol)
}

// syncUnsupported: FlushFileBuffers on a file system or redirector that
// cannot flush.
func syncUnsupported(err error) bool {
	return errors.Is(err, windows.ERROR_INVALID_FUNCTION) || errors.Is(err, windows.ERROR_NOT_SUPPORTED)
}
