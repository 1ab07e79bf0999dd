//go:build !linux

package relay

import "os"

// TakeStdio returns the channel's two ends, the process's stdin and
// stdout, and points os.Stdin and os.Stdout at the null device so that no
// stray print of this process writes frames. Children cannot inherit the
// channel: os/exec passes a child only the handles it is given (on
// Windows, PROC_THREAD_ATTRIBUTE_HANDLE_LIST), and the relay gives pipes.
func TakeStdio() (in, out *os.File, err error) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	in, out = os.Stdin, os.Stdout
	os.Stdin, os.Stdout = null, null
	return in, out, nil
}
