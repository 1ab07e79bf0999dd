package procid

import "golang.org/x/sys/windows"

// Start is pid's creation time (a FILETIME: 100 ns units since 1601),
// ok false when no such process runs.
func Start(pid int) (start uint64, ok bool) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION|windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return 0, false
	}
	defer windows.CloseHandle(h)
	return startOf(h)
}

func startOf(h windows.Handle) (uint64, bool) {
	if ev, err := windows.WaitForSingleObject(h, 0); err != nil || ev != uint32(windows.WAIT_TIMEOUT) {
		return 0, false // exited (an open handle keeps a dead process openable)
	}
	var c, e, k, u windows.Filetime
	if err := windows.GetProcessTimes(h, &c, &e, &k, &u); err != nil {
		return 0, false
	}
	return uint64(c.HighDateTime)<<32 | uint64(c.LowDateTime), true
}

// KillStarted terminates pid only while it is the process created at
// start (never a process that reused the pid): the check and the kill use
// one handle, which pins the process. killed false: no such process.
func KillStarted(pid int, start uint64) (killed bool, err error) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION|windows.SYNCHRONIZE|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err != nil {
		if err == windows.ERROR_INVALID_PARAMETER { // no such pid
			return false, nil
		}
		return false, err
	}
	defer windows.CloseHandle(h)
	if got, ok := startOf(h); !ok || got != start {
		return false, nil
	}
	if err := windows.TerminateProcess(h, 1); err != nil {
		return false, err
	}
	return true, nil
}

// User is the SID of the user pid's primary token runs as ("S-1-5-21-..."),
// read from outside the process (OpenProcessToken, GetTokenUser): what a
// workload cannot forge about itself.
func User(pid int) (string, error) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return "", err
	}
	defer windows.CloseHandle(h)
	var tok windows.Token
	if err := windows.OpenProcessToken(h, windows.TOKEN_QUERY, &tok); err != nil {
		return "", err
	}
	defer tok.Close()
	u, err := tok.GetTokenUser()
	if err != nil {
		return "", err
	}
	return u.User.Sid.String(), nil
}
