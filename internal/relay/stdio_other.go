//go:build !linux

package relay

import (
	"fmt"
	"os"
)

// TakeStdio returns the channel's two ends, the process's stdin and
// stdout, and points os.Stdin and os.Stdout at the null device so that no
// stray print of this process writes frames. Children cannot inherit the
// channel: os/exec passes a child only the handles it is given (on
// Windows, PROC_THREAD_ATTRIBUTE_HANDLE_LIST), and the relay gives pipes.
// It also confines the process (on Windows, a process DACL that keeps a
// workload of its token out: see confine). Call it once, before Serve.
func TakeStdio() (in, out *os.File, err error) {
	if err := confine(); err != nil {
		return nil, nil, fmt.Errorf("relay: confine: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	in, out = os.Stdin, os.Stdout
	os.Stdin, os.Stdout = null, null
	return in, out, nil
}
