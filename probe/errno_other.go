//go:build !linux && !windows

package probe

import (
	"fmt"
	"os"
	"syscall"
)

func errnoName(e syscall.Errno) string { return fmt.Sprintf("errno%d", uintptr(e)) }

func unlink(path string) error { return os.Remove(path) }
