package gateway

import (
	"os"
	"syscall"
)

// openLog opens a sandbox's log in LogDir for tail: never a link or a fifo
// put in its place (O_NOFOLLOW, O_NONBLOCK; tail then refuses what is not
// a regular file).
func openLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
}
