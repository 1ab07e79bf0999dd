//go:build !unix && !windows

package wintask

import "errors"

// errUnsupported: this system has neither Windows DACLs nor Unix modes.
var errUnsupported = errors.New("wintask: writing and checking a task definition needs Windows or a Unix system")

// Write is not supported here: it returns an error.
func Write(path string, xml []byte) error { return errUnsupported }

// Check cannot check anything here: it returns that as a warning.
func Check(path, exe, agentSID string) []string {
	return []string{"The task's files cannot be checked on this system (" + errUnsupported.Error() + ")."}
}
