package mxc

import "golang.org/x/sys/windows"

// processAlive reports whether process pid runs. Opening it is not
// enough: an exited process stays openable while any handle to it is
// open (its parent's, say), so it is alive only while its handle is not
// signaled (WaitForSingleObject, "Process Security and Access Rights").
// A process this user may not open (another user's) counts as alive.
func processAlive(pid int) bool {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return err == windows.ERROR_ACCESS_DENIED
	}
	defer windows.CloseHandle(h)
	ev, err := windows.WaitForSingleObject(h, 0)
	return err == nil && ev == uint32(windows.WAIT_TIMEOUT)
}
