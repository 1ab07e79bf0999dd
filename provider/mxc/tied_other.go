//go:build !linux && !windows

package mxc

import "os/exec"

// startTied: nothing ties wxc-exec to corral here.
func startTied(cmd *exec.Cmd, _ bool) (release func(), err error) { return func() {}, cmd.Start() }
