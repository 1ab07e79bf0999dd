//go:build !unix

package consent

import "os"

// fileID: no inode here; the digest binds the path alone.
func fileID(os.FileInfo) (dev, ino uint64) { return 0, 0 }

// alive: a once grant lasts until the session ends.
func alive(int) bool { return true }

// sessionLeader: pid itself.
func sessionLeader(pid int) int { return pid }
