package gateway

import (
	"os"

	"golang.org/x/sys/windows"
)

// openLog opens a sandbox's log in LogDir for tail: never a link put in
// its place (FILE_FLAG_OPEN_REPARSE_POINT opens a symlink or junction
// itself, which tail then refuses as not a regular file).
func openLog(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		windows.OPEN_EXISTING, windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}
