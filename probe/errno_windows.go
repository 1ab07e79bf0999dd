package probe

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/windows"
)

// posixNames are the POSIX names of the Windows errors the probes meet,
// so that a report reads the same on every OS ("System Error Codes",
// "Windows Sockets Error Codes"); others are "errnoN".
var posixNames = map[syscall.Errno]string{
	windows.ERROR_FILE_NOT_FOUND:     "ENOENT",
	windows.ERROR_PATH_NOT_FOUND:     "ENOENT",
	windows.ERROR_ACCESS_DENIED:      "EACCES",
	windows.ERROR_SHARING_VIOLATION:  "EBUSY",
	windows.ERROR_FILE_EXISTS:        "EEXIST",
	windows.ERROR_ALREADY_EXISTS:     "EEXIST",
	windows.ERROR_DIR_NOT_EMPTY:      "ENOTEMPTY",
	windows.ERROR_DIRECTORY:          "ENOTDIR",
	windows.ERROR_WRITE_PROTECT:      "EROFS",
	windows.ERROR_PRIVILEGE_NOT_HELD: "EPERM",
	windows.WSAECONNREFUSED:          "ECONNREFUSED",
	windows.WSAECONNRESET:            "ECONNRESET",
	windows.WSAETIMEDOUT:             "ETIMEDOUT",
	windows.WSAENETUNREACH:           "ENETUNREACH",
	windows.WSAEHOSTUNREACH:          "EHOSTUNREACH",
	windows.WSAEACCES:                "EACCES",
	windows.WSAEADDRINUSE:            "EADDRINUSE",
}

func errnoName(e syscall.Errno) string {
	if n, ok := posixNames[e]; ok {
		return n
	}
	return fmt.Sprintf("errno%d", uintptr(e))
}

// unlink removes a file, never a directory (DeleteFile): os.Remove would
// remove an empty directory too, which unlink(2) refuses.
func unlink(path string) error {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return err
	}
	return windows.DeleteFile(p)
}
