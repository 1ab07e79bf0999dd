//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// FileError is a failed operation on one cgroup file or directory. It names
// the path and the errno (e.g. "EBUSY") and unwraps to the syscall.Errno, so
// errors.Is(err, unix.EBUSY) works.
type FileError struct {
	Op    string // "write", "read", "mkdir", "rmdir", "open"
	Path  string
	Value string // what was written, for writes
	Err   error
}

func (e *FileError) Error() string {
	op := e.Op
	if e.Op == "write" {
		op = fmt.Sprintf("write %q to", e.Value)
	}
	return fmt.Sprintf("cgroup: %s %s: %s", op, e.Path, errText(e.Err))
}

func (e *FileError) Unwrap() error { return e.Err }

// errText renders err as "EBUSY (device or resource busy)" when it carries
// an errno.
func errText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		if name := unix.ErrnoName(en); name != "" {
			return name + " (" + en.Error() + ")"
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func fileErr(op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &FileError{Op: op, Path: path, Err: err}
}

// writeFile writes v to an existing cgroup file in one write(2). Unlike
// os.WriteFile it never creates or truncates (cgroupfs rejects O_CREAT with
// a misleading error on a missing file).
func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return &FileError{Op: "write", Path: path, Value: v, Err: unwrapPath(err)}
	}
	_, err = f.Write([]byte(v))
	cerr := f.Close()
	if err == nil {
		err = cerr
	}
	if err != nil {
		return &FileError{Op: "write", Path: path, Value: v, Err: unwrapPath(err)}
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
