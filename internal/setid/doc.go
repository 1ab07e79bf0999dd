// Package setid decides whether a host file is "set-id": a regular file
// whose execution can raise privilege, because it has the set-user-ID or
// set-group-ID bit (chmod(2), inode(7)) or a security.capability extended
// attribute (file capabilities, capabilities(7)).
//
// The exec bits do not matter: the owner of such a file can chmod(2) it
// executable, and neither chmod nor a write through mmap(2) clears the
// bits or the attribute (write(2) would, through file_remove_privs). So a
// file is set-id whatever its mode, and a grant that makes the workload
// the owner of a set-id file (an idmapped read-write bind of a root
// caller's tree) must not give it write access. Only regular files count:
// a set-gid directory only passes its group on to new files.
//
// It is Linux-only: other systems have no such bits on the files Corral
// grants.
package setid
