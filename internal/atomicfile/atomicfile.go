// Package atomicfile replaces a file so that a crash leaves either the old
// content or the new, never a mix: a temporary file in the same directory,
// fsync, rename(2) over the target (atomic within one file system, POSIX
// rename), then an fsync of the directory so the rename itself is durable.
package atomicfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
)

// WriteJSON writes v as indented JSON (with a final newline) to path with
// the given mode.
func WriteJSON(path string, v any, mode os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return Write(path, append(b, '\n'), mode)
}

// Write replaces path with data, mode applied to the new file. The
// temporary file (".NAME.*.tmp" beside path) is removed on failure.
func Write(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil && runtime.GOOS != "windows" {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // not supported on every OS; the rename is what matters
		d.Close()
	}
	return nil
}
