//go:build !unix

package policy

import "io/fs"

// ownerOf cannot tell who may write a path on this platform (Windows
// access is in ACLs): links are not vetted here, see plantedLink.
func ownerOf(fi fs.FileInfo) (uid uint32, perm fs.FileMode, ok bool) { return 0, 0, false }

// FileIDOf is zero here: no inode numbers.
func FileIDOf(fi fs.FileInfo) FileID { return FileID{} }
