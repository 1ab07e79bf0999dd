package mxc

import "github.com/corral-sandbox/corral/internal/winfile"

// makePrivate makes directory path the caller's alone, the counterpart of
// mode 0700 (winfile.MakePrivateDir: walked without following links,
// refused when another user owns it, given a protected owner-only DACL
// inherited by what is made inside).
func makePrivate(path string) error { return winfile.MakePrivateDir(path) }
