//go:build !windows

package wintask

import (
	"context"
	"errors"
)

// ErrNotWindows: Task Scheduler, which Register and Unregister drive, is
// Windows'.
var ErrNotWindows = errors.New("wintask: Task Scheduler is Windows': a logon task is registered only on Windows")

// Register registers session name's task from path on Windows (see the
// Windows build); elsewhere it returns ErrNotWindows.
func Register(ctx context.Context, name, path string) error { return ErrNotWindows }

// Unregister removes session name's task on Windows (see the Windows
// build); elsewhere it returns ErrNotWindows.
func Unregister(ctx context.Context, name string) error { return ErrNotWindows }
