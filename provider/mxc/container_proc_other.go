//go:build !linux && !windows

package mxc

// procStart: no way to name a process across pid reuse here, so no
// recorded process is ever taken for a live one (and none is killed).
func procStart(pid int) (uint64, bool) { return 0, false }

func killStarted(pid int, start uint64) (bool, error) { return false, nil }
