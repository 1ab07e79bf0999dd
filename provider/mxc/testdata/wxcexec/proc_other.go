//go:build !linux && !windows

package main

import (
	"os"
	"syscall"
)

var forwardedSignals = []os.Signal{os.Interrupt}

func sysProcAttr() *syscall.SysProcAttr { return nil }

func contain(*os.Process) {}

// killTree kills the direct child only (no portable tree walk).
func killTree(p *os.Process) { _ = p.Kill() }
