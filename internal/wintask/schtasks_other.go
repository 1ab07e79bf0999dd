//go:build !windows

package wintask

import "context"

// Register registers session name's task from path on Windows (see the
// Windows build); elsewhere it returns ErrNotWindows.
func Register(ctx context.Context, name, path string) error { return ErrNotWindows }

// Unregister removes session name's task on Windows (see the Windows
// build); elsewhere it returns ErrNotWindows.
func Unregister(ctx context.Context, name string) error { return ErrNotWindows }
