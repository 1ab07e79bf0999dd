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
