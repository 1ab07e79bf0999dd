package relay

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// TakeStdio moves the process's stdin and stdout, the channel, to new
// close-on-exec descriptors and puts /dev/null on fds 0 and 1, so that no
// child and no stray print of this process can write frames. It returns
// the channel's two ends. It also confines the process (non-dumpable, a
// child subreaper: see confine). Call it once, before Serve.
func TakeStdio() (in, out *os.File, err error) {
	if err := confine(); err != nil {
		return nil, nil, fmt.Errorf("relay: prctl: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	defer null.Close()
	var fds [2]int
	for i := range fds {
		if fds[i], err = unix.FcntlInt(uintptr(i), unix.F_DUPFD_CLOEXEC, 3); err != nil {
			return nil, nil, fmt.Errorf("relay: moving fd %d: %w", i, err)
		}
		if err := unix.Dup3(int(null.Fd()), i, 0); err != nil {
			return nil, nil, fmt.Errorf("relay: replacing fd %d: %w", i, err)
		}
	}
	return os.NewFile(uintptr(fds[0]), "relay-in"), os.NewFile(uintptr(fds[1]), "relay-out"), nil
}
