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
	sockets, _ := Scan(root, nil, budget, nil)
	return sockets
}

// Nested is a protected name found below the top of a read-write tree
// (e.g. the .git of a nested repository).
type Nested struct {
	Path string
	Dir  bool
	Name string
}

// Scan walks root like Sockets and also returns the entries below root's
// top level whose name is in protected (a nested .git, .bashrc ...): the
// policy protects those names directly under a read-write root, and the
// same file one level down is as dangerous. A nested protected directory
// is not descended into. regular, when not nil, is called with every other
// regular file (for checks of the caller's own, e.g. set-id bits).
func Scan(root string, protected map[string]bool, budget *int, regular func(path string, d fs.DirEntry)) (sockets []string, nested []Nested) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: the workload cannot use it either
		}
		*budget--
		if *budget < 0 {
			return fs.SkipAll
		}
		if p == root {
			return nil
		}
		if d.Type()&fs.ModeSocket != 0 {
			sockets = append(sockets, p)
			return nil
		}
		if protected[d.Name()] && filepath.Dir(p) != root {
			nested = append(nested, Nested{Path: p, Dir: d.IsDir(), Name: d.Name()})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if regular != nil && d.Type().IsRegular() {
			regular(p, d)
		}
		return nil
	})
	return sockets, nested
}
