//go:build !windows

package mxc

import (
	"errors"
	"os"
	"syscall"
)

// processAlive reports whether process pid runs: signal 0 probes it.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}
