//go:build linux && !amd64 && !arm64

package seccomp

// No syscall table for this architecture: Build returns an error.
const (
	auditArch     = 0
	x32SyscallBit = 0
)

var sysnums map[string]uint32
