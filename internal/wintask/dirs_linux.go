package wintask

import (
	"os"

	"github.com/corral-sandbox/corral/internal/trust"
)

// dirsCheck checks dir and every directory above it: trust.Dirs for the
// caller's uid.
func dirsCheck(dir string) error { return trust.Dirs(dir, uint32(os.Geteuid()), nil) }
