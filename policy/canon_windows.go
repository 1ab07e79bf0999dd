package policy

import (
	"fmt"
	"io/fs"
	"strings"

	"golang.org/x/sys/windows"
)

// canonical is the final path of p on Windows: the file is opened (without
// any access right, FILE_FLAG_BACKUP_SEMANTICS so directories open too) and
// GetFinalPathNameByHandleW names it, which follows symlinks, junctions and
// volume mount points to their target and gives every component its long
// name (no 8.3 alias) in its on-disk case (Win32 "GetFinalPathNameByHandleW").
// filepath.EvalSymlinks is not enough: since Go 1.23 it stops at mount
// points and junctions. A target on a network share (\\?\UNC\...) is an
// error: grants are of local folders only.
func canonical(p string) (string, error) {
	name, err := windows.UTF16PtrFromString(p)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
	h, err := windows.CreateFile(name, 0, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer windows.CloseHandle(h)
	buf := make([]uint16, windows.MAX_LONG_PATH)
	n, err := windows.GetFinalPathNameByHandle(h, &buf[0], uint32(len(buf)), 0 /* FILE_NAME_NORMALIZED | VOLUME_NAME_DOS */)
	if err != nil {
		return "", &fs.PathError{Op: "GetFinalPathNameByHandle", Path: p, Err: err}
	}
	if int(n) > len(buf) {
		return "", &fs.PathError{Op: "GetFinalPathNameByHandle", Path: p, Err: windows.ERROR_FILENAME_EXCED_RANGE}
	}
	final := windows.UTF16ToString(buf[:n])
	switch {
	case strings.HasPrefix(final, `\\?\UNC\`):
		return "", &fs.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("it resolves to the network share \\\\%s", final[len(`\\?\UNC\`):])}
	case strings.HasPrefix(final, `\\?\`):
		final = final[len(`\\?\`):]
	}
	return final, nil
}

// Canonical is the real path of p as Resolve makes grants' paths:
// filepath.EvalSymlinks elsewhere, GetFinalPathNameByHandleW here
// (canonical).
func Canonical(p string) (string, error) { return canonical(p) }

// hostWinFolders is what this Windows host says its system folders and
// profiles directory are (GetSystemWindowsDirectoryW, SHGetKnownFolderPath
// of FOLDERID_Windows, ProgramFiles, ProgramFilesX64, ProgramFilesX86,
// ProgramData, UserProfiles), each canonical; one the system cannot name is
// left out (newWinLayout's stock locations still apply).
func hostWinFolders() winLayout {
	var l winLayout
	clean := func(p string, err error) string {
		if err != nil || p == "" {
			return ""
		}
		if c, err := canonical(p); err == nil {
			return c
		}
		return WinClean(p)
	}
	if d := clean(windows.GetSystemWindowsDirectory()); d != "" {
		l.system = append(l.system, d)
	}
	for _, id := range []*windows.KNOWNFOLDERID{windows.FOLDERID_Windows, windows.FOLDERID_ProgramFiles, windows.FOLDERID_ProgramFilesX64, windows.FOLDERID_ProgramFilesX86} {
		if d := clean(windows.KnownFolderPath(id, 0)); d != "" {
			l.system = append(l.system, d)
		}
	}
	if d := clean(windows.KnownFolderPath(windows.FOLDERID_ProgramData, 0)); d != "" {
		l.programData = append(l.programData, d)
	}
	if d := clean(windows.KnownFolderPath(windows.FOLDERID_UserProfiles, 0)); d != "" {
		l.profiles = append(l.profiles, d)
	}
	return l
}

// trustedLinkOwners are the owners whose links a grant may pass through:
// SYSTEM (S-1-5-18), Administrators (S-1-5-32-544) and TrustedInstaller
// (S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464), who
// made the system's own junctions (C:\Documents and Settings, ...). A
// user's processes — a workload among them — make links owned by the user.
var trustedLinkOwners = []string{"S-1-5-18", "S-1-5-32-544", "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"}

// linkOwnerUntrusted says why the link at p (opened itself,
// FILE_FLAG_OPEN_REPARSE_POINT) could have been made by someone other
// than the system, or "".
func linkOwnerUntrusted(p string) string {
	name, err := windows.UTF16PtrFromString(p)
	if err != nil {
		return err.Error()
	}
	h, err := windows.CreateFile(name, windows.READ_CONTROL, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return fmt.Sprintf("cannot be inspected (%v)", err)
	}
	defer windows.CloseHandle(h)
	sd, err := windows.GetSecurityInfo(h, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Sprintf("has an owner that cannot be read (%v)", err)
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return "has no owner that can be read"
	}
	sid := owner.String()
	for _, t := range trustedLinkOwners {
		if sid == t {
			return ""
		}
	}
	return fmt.Sprintf("is owned by %s, not by SYSTEM, Administrators or TrustedInstaller", sid)
}
