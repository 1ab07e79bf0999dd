package isolation

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/trust"
)

// privateDir makes dir (and its missing parents) the caller's alone
// (0700), after checking that no other user controls a directory on the
// way (trust.MkdirAll).
func privateDir(dir string) error {
	return trust.MkdirAll(dir, 0o700, uint32(os.Getuid()), nil)
}

// lock takes the session's lifecycle lock (flock(2) on DIR/lock, opened
// without following a link), waiting up to wait.
func lock(p Paths, wait time.Duration) (func(), error) {
	f, err := os.OpenFile(p.Lock(), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return lockHeld(p, f)
		}
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			return nil, busy(p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
