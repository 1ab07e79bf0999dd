//go:build linux

package docker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
)

// A root caller's root-owned read-write trees reach the container through
// idmapped mounts corral makes itself, since Docker (20.10 here) makes
// none for binds: the supervisor clones each such
// bind's host path (open_tree, non-recursive as Docker's binds are), gives
// the clone the mapping that swaps uid and gid 0 with the workload's and
// keeps every other id (Documentation/filesystems/idmappings.rst), and
// attaches it below <state dir>/idmap (0700, root's: no host process but
// root reaches it), whose path the container then binds. Inside, root's
// files appear the workload's and what the workload creates is root's on
// disk — the linux provider's model for the same caller
// (provider/linux/idmap_linux.go). Every other owner stays itself, so a
// repository another uid planted in the tree is still not the workload's
// and git still refuses it ("dubious ownership"); one owned by the
// workload's own uid on disk appears root's, refused too.
//
// What the workload gains is exactly the grant: it can write the tree it
// was granted read-write. It cannot make a set-id file there (corral's
// seccomp filter refuses set-id mode bits: Map idmaps only with that layer
// active), nor change one the tree holds (they are bound read-only,
// found by the same walk as nested protected names), nor chown (no
// CAP_CHOWN), nor reach past the clone's root.

// idmapDir is the directory of a state dir holding the idmapped clones.
const idmapDir = "idmap"

// idmapSource is where the idmapped clone of bind i of the spec is
// attached on the host: the container binds it instead of the bind's
// Source.
func idmapSource(state string, i int) string {
	return filepath.Join(state, idmapDir, strconv.Itoa(i))
}

// swapIDs is the id mapping that exchanges id 0 and w and maps every
// other id of the 32-bit range except (uid_t)-1 onto itself, as ranges
// of a user namespace's map (user_namespaces(7)).
func swapIDs(w int) []syscall.SysProcIDMap {
	const last = 4294967294 // (uid_t)-1 is no id
	out := []syscall.SysProcIDMap{{ContainerID: 0, HostID: w, Size: 1}, {ContainerID: w, HostID: 0, Size: 1}}
	if w > 1 {
		out = append(out, syscall.SysProcIDMap{ContainerID: 1, HostID: 1, Size: w - 1})
	}
	if w < last {
		out = append(out, syscall.SysProcIDMap{ContainerID: w + 1, HostID: w + 1, Size: last - w})
	}
	return out
}

// swapUserns returns an open fd of a user namespace whose maps are
// swapIDs(uid) and swapIDs(gid), as mount_setattr(MOUNT_ATTR_IDMAP) takes
// it. The namespace is made by a child that runs no code of its own: it
// is traced, so it stops at its execve (ptrace(2), PTRACE_TRACEME), its
// namespace is opened and it is killed and reaped. Errors: the child
// cannot be made (no user namespaces, ptrace refused, e.g. Yama's
// ptrace_scope 3) or its namespace cannot be opened.
func swapUserns(uid, gid int) (int, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args[0] = "corral-idmap"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: swapIDs(uid),
		GidMappings: swapIDs(gid),
		Pdeathsig:   syscall.SIGKILL,
		Ptrace:      true,
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("user namespace for the idmapping: %w", err)
	}
	pid := cmd.Process.Pid
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	_ = cmd.Process.Kill()
	for { // Wait would return at the trace stop: reap the exit itself
		var ws unix.WaitStatus
		if _, werr := unix.Wait4(pid, &ws, 0, nil); werr == unix.EINTR {
			continue
		} else if werr != nil || ws.Exited() || ws.Signaled() {
			break
		}
	}
	_ = cmd.Process.Release()
	if err != nil {
		return -1, fmt.Errorf("user namespace for the idmapping: %w", err)
	}
	return fd, nil
}

// idmapClone returns a detached, non-recursive clone of path (a link is
// not followed) idmapped with the namespace userns, nosuid and nodev.
// Errors name the path; a filesystem without idmap support (before Linux
// 6.3 tmpfs, NFS, ...) fails here.
func idmapClone(path string, userns int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", path, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmapped mount of %s (needs a filesystem with idmap support: ext4, xfs, btrfs, tmpfs ≥ 6.3): %w", path, err)
	}
	return fd, nil
}

// idmapProbe says why paths cannot be idmapped for the workload uid:gid
// (Map, before it plans the clones), or "" when each can: a clone of each
// is idmapped and dropped, attached nowhere. A variable so tests can make
// it fail.
var idmapProbe = func(paths []string, uid, gid int) string {
	ns, err := swapUserns(uid, gid)
	if err != nil {
		return err.Error()
	}
	defer unix.Close(ns)
	for _, p := range paths {
		fd, err := idmapClone(p, ns)
		if err != nil {
			return err.Error()
		}
		unix.Close(fd)
	}
	return ""
}

// mountIDMaps attaches the idmapped clone of every bind the plan marks
// IDMap at its idmapSource (Provision, as root, after the placeholders
// exist and before the container is created). The clones stay until the
// state dir is removed (removeState detaches every mount in it first).
func (s *Sandbox) mountIDMaps() error {
	dir := filepath.Join(s.state, idmapDir)
	ns := -1
	defer func() {
		if ns >= 0 {
			unix.Close(ns)
		}
	}()
	for i, b := range s.spec.Binds {
		if !b.IDMap {
			continue
		}
		if ns < 0 {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			var err error
			if ns, err = swapUserns(s.spec.UID, s.spec.GID); err != nil {
				return err
			}
		}
		at := idmapSource(s.state, i)
		var err error
		if b.Dir {
			err = os.Mkdir(at, 0o700)
		} else {
			var f *os.File
			if f, err = os.OpenFile(at, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
				f.Close()
			}
		}
		if err != nil {
			return err
		}
		fd, err := idmapClone(b.Source, ns)
		if err != nil {
			return err
		}
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("attach the idmapped mount of %s at %s: %w", b.Source, at, err)
		}
	}
	return nil
}

// errIDMapLimit is why trees too large to be vetted for set-id files are
// not idmapped.
var errIDMapLimit = errors.New("the read-write trees hold more entries than corral examines, so their set-id files cannot all be kept read-only")

// markIDMaps sets IDMap on the binds of roots (host paths of root-owned
// read-write grants) and on every bind of a host path inside one (nested
// protected names, placeholders, set-id files): those are cloned from the
// host too, and must show the same owners as the tree around them.
func markIDMaps(spec *Spec, roots []string) {
	for i := range spec.Binds {
		b := &spec.Binds[i]
		for _, r := range roots {
			if !b.Mask && b.Source != "" && policy.Within(b.Source, r) {
				b.IDMap = true
			}
		}
	}
}
