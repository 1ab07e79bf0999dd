//go:build unix

package startup

import "golang.org/x/sys/unix"

// Now is CLOCK_MONOTONIC in ns.
func Now() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
