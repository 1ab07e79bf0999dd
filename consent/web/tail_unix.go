//go:build unix

package web

import "syscall"

// A final symlink is not followed, a fifo not waited on (open(2)).
const (
	oNoFollow = syscall.O_NOFOLLOW
	oNonBlock = syscall.O_NONBLOCK
)
