// Package hostscan looks through host directory trees before they are
// granted to a sandbox.
package hostscan

import (
	"io/fs"
	"path/filepath"
)

// Limit bounds the entries examined per run: walking a huge tree would
// stall the start; callers report what was not looked at.
const Limit = 200_000

// Sockets returns the unix sockets under root (Landlock before ABI 9
// cannot stop connect(2) on a socket file, so providers cover them). Each
// entry examined takes one from *budget; when it runs out the walk stops
// and *budget is negative. Unreadable parts are skipped.
func Sockets(root string, budget *int) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		*budget--
		if *budget < 0 {
			return fs.SkipAll
		}
		if d.Type()&fs.ModeSocket != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}
