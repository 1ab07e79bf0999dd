// Package execfile writes executables that are run right after, by a
// process that starts other processes concurrently (qualify's copy of the
// corral binary, the test suites' probe binaries).
package execfile

import (
	"io"
	"os"
	"syscall"
)

// Copy copies the file src to dst (created or truncated) with mode.
//
// No process is forked by this process while dst is open for writing: a
// child forked then keeps the descriptor until its own exec, and running
// dst in that window fails with ETXTBSY (golang/go#22315).
// syscall.ForkLock is the standard library's lock for exactly this.
func Copy(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
