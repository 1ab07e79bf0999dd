//go:build windows

package wintask

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winfile"
)

// Check returns warnings, plain sentences, when the task's trusted base
// could be changed by anyone but the caller, SYSTEM and Administrators
// (and TrustedInstaller as an owner, the owner of Windows' own files):
// the task definition at path and the program exe it runs, each walked
// from its volume root by handle (winfile.Walk):
//
//   - each directory on the way must pass winfile.TrustedDir: owned by
//     those, and granting no one else the right to delete, rename or
//     re-permit what is in it, nor, for the directory the file is in, to
//     add entries (a name planted there);
//   - the file must be one (not a directory, not a symlink or other
//     reparse point, which Task Scheduler would follow) and pass the same
//     rule with last set, which on a file refuses FILE_WRITE_DATA,
//     FILE_APPEND_DATA (the same bits as FILE_ADD_FILE and
//     FILE_ADD_SUBDIRECTORY, winnt.h), DELETE, WRITE_DAC and WRITE_OWNER
//     to others; the definition must moreover be the caller's own file
//     with one link (winfile.CheckFile), as Write leaves it;
//   - a missing file or directory, or one that cannot be read, is a
//     warning too.
//
// A right granted to agentSID (the session's agent user, a SID string; ""
// or an unparsable one names no one) or a file it owns is said so. A
// right granted to a group the agent user may be in (Users, Everyone) is
// a warning all the same. The registered task itself is kept by Task
// Scheduler (which only administrators may change); path matters when it
// is registered again.
func Check(path, exe, agentSID string) []string {
	user, err := winfile.User()
	if err != nil {
		return []string{fmt.Sprintf("The caller's SID cannot be read (%v), so the task's files were not checked.", err)}
	}
	agent, _ := windows.StringToSid(agentSID)
	var w []string
	w = append(w, checkPath(path, "the task definition", user, agent, true)...)
	return append(w, checkPath(exe, "the program the task runs", user, agent, false)...)
}

// checkPath checks p, what it is to the task (a phrase), and its
// directories; own: p must be the caller's own file (CheckFile).
func checkPath(p, what string, user, agent *windows.SID, own bool) []string {
	var w []string
	// say adds the warning that subject, open as h, failed a rule with err.
	say := func(subject string, h windows.Handle, err error) {
		who := "another user"
		var ge *winfile.GrantError
		if errors.As(err, &ge) {
			who = "whoever has that access (the agent user too, if it is among them)"
			if agent != nil && ge.SID.Equals(agent) {
				who = "the session's agent user"
			}
		} else if o, oerr := winfile.Owner(h); oerr == nil && agent != nil && o.Equals(agent) {
			who = "the session's agent user, its owner,"
		}
		w = append(w, fmt.Sprintf("%s %v: %s could change what runs at your logon.", subject, err, who))
	}
	walk := winfile.Walk{Check: func(d winfile.Dir) error {
		if err := winfile.TrustedDir(d.Handle, user, d.Last); err != nil {
			say(fmt.Sprintf("%s (a directory of %s %s)", d.Path, what, p), d.Handle, err)
		}
		return nil
	}}
	h, err := walk.Open(p, windows.READ_CONTROL|windows.FILE_READ_ATTRIBUTES|windows.SYNCHRONIZE,
		windows.FILE_OPEN, windows.FILE_NON_DIRECTORY_FILE, nil)
	subject := fmt.Sprintf("%s (%s)", p, what)
	var ce *winfile.ComponentError
	switch {
	case errors.Is(err, os.ErrNotExist):
		return append(w, fmt.Sprintf("%s does not exist.", subject))
	case errors.As(err, &ce):
		return append(w, fmt.Sprintf("%s: %v, which Task Scheduler would follow: give its real path.", subject, ce))
	case errors.Is(err, windows.STATUS_FILE_IS_A_DIRECTORY):
		return append(w, fmt.Sprintf("%s is a directory or a junction, not a file.", subject))
	case err != nil:
		return append(w, fmt.Sprintf("%s cannot be checked: %v.", subject, err))
	}
	defer windows.CloseHandle(h)
	if own {
		if err := winfile.CheckFile(h, user); err != nil {
			say(subject, h, err)
			return w
		}
	} else {
		var fi windows.ByHandleFileInformation
		if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
			return append(w, fmt.Sprintf("%s cannot be checked: %v.", subject, err))
		}
		if fi.FileAttributes&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 {
			return append(w, fmt.Sprintf("%s is a symlink or another reparse point, which Task Scheduler would follow: give its real path.", subject))
		}
	}
	if err := winfile.TrustedDir(h, user, true); err != nil {
		say(subject, h, err)
	}
	return w
}
