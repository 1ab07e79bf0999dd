package isolation

import (
	"os"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/trust"
	"github.com/corral-sandbox/corral/service"
)

// privateDir makes dir (and its missing parents) the caller's alone
// (0700), after checking that no other user controls a directory on the
// way (trust.MkdirAll).
func privateDir(dir string) error {
	return trust.MkdirAll(dir, 0o700, uint32(os.Getuid()), nil)
}

// lock takes the session's lifecycle lock: service.Lock's (flock(2) on
// DIR/lock, opened without following a link, refused once the file was
// removed), its release made idempotent for removeDir.
func lock(p Paths, wait time.Duration) (func(), error) {
	unlock, err := service.Lock(service.Paths{Dir: p.Dir}, wait)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(unlock) }, nil
}
