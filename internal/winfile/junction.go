//go:build windows

package winfile

import (
	"os"

	"golang.org/x/sys/windows"
)

// MakeJunction makes the directory link a junction to target
// (FSCTL_SET_REPARSE_POINT with a REPARSE_DATA_BUFFER's
// MountPointReparseBuffer, as mklink /J does). For tests of link
// refusal: unlike a symlink, a junction needs no privilege.
func MakeJunction(link, target string) error {
	if err := os.Mkdir(link, 0o700); err != nil {
		return err
	}
	sub, err := windows.UTF16FromString(`\??\` + target)
	if err != nil {
		return err
	}
	sub = sub[:len(sub)-1] // without the NUL
	n := 2 * len(sub)
	// Tag, data length, reserved; substitute name offset and length,
	// print name offset (after the substitute's NUL) and length 0; names.
	buf := make([]byte, 16+n+4)
	put := func(off int, v int) { buf[off], buf[off+1] = byte(v), byte(v>>8) }
	put(0, windows.IO_REPARSE_TAG_MOUNT_POINT&0xffff)
	put(2, windows.IO_REPARSE_TAG_MOUNT_POINT>>16)
	put(4, len(buf)-8)
	put(10, n)
	put(12, n+2)
	for i, c := range sub {
		put(16+2*i, int(c))
	}
	p, err := windows.UTF16PtrFromString(link)
	if err != nil {
		return err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_WRITE, 0, nil, windows.OPEN_EXISTING,
		windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(h)
	var ret uint32
	return windows.DeviceIoControl(h, windows.FSCTL_SET_REPARSE_POINT, &buf[0], uint32(len(buf)), nil, 0, &ret, nil)
}
