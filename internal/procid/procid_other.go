//go:build !linux && !windows

package procid

import "errors"

// Start: no way to name a process across pid reuse here, so no
// recorded process is ever taken for a live one (and none is killed).
func Start(pid int) (uint64, bool) { return 0, false }

func KillStarted(pid int, start uint64) (bool, error) { return false, nil }

func User(pid int) (string, error) { return "", errors.ErrUnsupported }
