//go:build windows

package wintask

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/windows"
)

// Register registers session name's task from the definition at path
// (written by Write): `schtasks /Create /TN \Corral\corral-service-NAME
// /XML PATH /F`, /F replacing a task of that name. schtasks is the system
// directory's (GetSystemDirectory), never one found on PATH. The error
// carries schtasks' output. ctx ends schtasks early.
func Register(ctx context.Context, name, path string) error {
	if err := validName(name); err != nil {
		return err
	}
	if out, err := schtasks(ctx, "/Create", "/TN", TaskName(name), "/XML", path, "/F"); err != nil {
		return fmt.Errorf("schtasks /Create /TN %s /XML %s: %v: %s", TaskName(name), path, err, clean(out))
	}
	return nil
}

// Unregister removes session name's task: `schtasks /Delete /TN
// \Corral\corral-service-NAME /F`. A task that does not exist is success:
// schtasks then fails with the system message of ERROR_FILE_NOT_FOUND
// (or ERROR_PATH_NOT_FOUND when the \Corral folder is missing too),
// which is recognized in the user's language (FormatMessage, as schtasks
// prints it) and in English. Any other failure is an error with schtasks'
// output; so is a message this cannot read (a console code page other
// than the message's), which fails safe: the caller learns the task may
// still be there.
func Unregister(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	out, err := schtasks(ctx, "/Delete", "/TN", TaskName(name), "/F")
	if err == nil || ctx.Err() == nil && notFound(out) {
		return nil
	}
	return fmt.Errorf("schtasks /Delete /TN %s: %v: %s", TaskName(name), err, clean(out))
}

// schtasks runs the system's schtasks.exe with args and returns its
// standard output and error together.
func schtasks(ctx context.Context, args ...string) ([]byte, error) {
	sys, err := windows.GetSystemDirectory()
	if err != nil {
		return nil, fmt.Errorf("the system directory: %w", err)
	}
	return exec.CommandContext(ctx, filepath.Join(sys, "schtasks.exe"), args...).CombinedOutput()
}

// notFound: schtasks' output says the task (or its folder) does not exist.
func notFound(out []byte) bool {
	msgs := []string{"cannot find the file specified", "cannot find the path specified"}
	for _, e := range []syscall.Errno{windows.ERROR_FILE_NOT_FOUND, windows.ERROR_PATH_NOT_FOUND} {
		msgs = append(msgs, strings.TrimRight(e.Error(), ". \r\n"))
	}
	for _, m := range msgs {
		if m != "" && bytes.Contains(bytes.ToLower(out), bytes.ToLower([]byte(m))) {
			return true
		}
	}
	return false
}

// clean is schtasks' output on one line.
func clean(out []byte) string {
	return strings.Join(strings.Fields(string(out)), " ")
}
