//go:build !unix

package startup

import "time"

var base = time.Now()

// Now is this process's monotonic clock in ns (one process only: no
// other process's marks are merged off unix).
func Now() int64 { return int64(time.Since(base)) }
