// Package rmtree removes a directory tree where os.RemoveAll cannot.
package rmtree

import (
	"io/fs"
	"os"
	"path/filepath"
)

// RemoveAll is os.RemoveAll with a fallback: on Windows RemoveAll deletes
// with POSIX semantics (FILE_DISPOSITION_INFORMATION_EX), which FAT
// volumes and Wine refuse ("Invalid function"); then every entry is
// removed bottom-up with plain DeleteFile/RemoveDirectory. WalkDir does
// not follow links, and a junction (ModeIrregular) is removed as itself.
func RemoveAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, werr error) error {
		switch {
		case werr != nil:
		case e.IsDir():
			dirs = append(dirs, p)
		default:
			os.Remove(p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
	if _, serr := os.Lstat(dir); os.IsNotExist(serr) {
		return nil
	}
	return err
}
