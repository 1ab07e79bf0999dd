//go:build linux

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// The mount tree is built with the new mount API (open_tree, mount_setattr,
// move_mount; Linux ≥ 5.12): every bind is a recursive clone made read-only
// recursively, so no submount of a read-only grant stays writable (a known
// hole of MS_BIND|MS_REMOUNT|MS_RDONLY, which is not recursive). Targets are
// opened with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS) below the new
// root, so a mount never follows a path something else could have swapped
// for a symlink. See Documentation/filesystems/mount_api.rst and openat2(2).

const resolveStrict = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openNoSymlinks opens an absolute host path as O_PATH, refusing symlinks in
// any component (grant paths are canonical, so a symlink means a swap).
func openNoSymlinks(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// cloneTree makes a detached recursive copy of the mount at path, with
// nosuid, nodev and (when ro) read-only set on the whole copy.
func cloneTree(path string, ro bool, dev bool) (int, error) {
	pfd, err := openNoSymlinks(path)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	fd, err := unix.OpenTree(pfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", path, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !dev {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount_setattr %s: %w", path, err)
	}
	return fd, nil
}

// tree builds the sandbox's root under a tmpfs at base.
type tree struct {
	base   string // host-side directory where the new root is mounted
	rootfd int    // O_PATH fd of the new root
	// synthetic lists the paths (inside) of mounts Corral created empty
	// (the root, tmpfs, masks): only below these may mount points be made.
	synthetic []string
	placed    []string        // every path mounted so far, inside
	binds     map[string]bool // the placed binds of host paths (grants, placeholders)
	trusted   []string        // where the trust bundle went (MountTrust), inside
	stored    []string        // where the Java trust store went (MountTrust, Store), inside
}

// enclosing returns the innermost placed mount containing p.
func (t *tree) enclosing(p string) string {
	best := "/"
	for _, m := range t.placed {
		if policy.Within(p, m) && len(m) >= len(best) && m != p {
			best = m
		}
	}
	return best
}

func (t *tree) isSynthetic(m string) bool {
	for _, s := range t.synthetic {
		if s == m {
			return true
		}
	}
	return false
}

// mountpoint makes sure the path p (inside) exists as a dir or file and
// returns an O_PATH fd to it. Missing components are created only inside
// mounts Corral made itself, never on a host bind.
func (t *tree) mountpoint(p string, dir bool) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		return unix.Dup(t.rootfd)
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolveStrict}
	if fd, err := unix.Openat2(t.rootfd, rel, how); err == nil {
		return fd, nil
	} else if err != unix.ENOENT {
		return -1, fmt.Errorf("mount point %s: %w", p, err)
	}
	if !t.isSynthetic(t.enclosing(p)) {
		return -1, fmt.Errorf("mount point %s: missing on a host path (it changed after the policy was resolved)", p)
	}
	// Create each missing component below the root fd, resolving strictly.
	parts := strings.Split(rel, "/")
	cur := ""
	for i, part := range parts {
		if cur == "" {
			cur = part
		} else {
			cur = cur + "/" + part
		}
		last := i == len(parts)-1
		if last && !dir {
			pfd, err := unix.Openat2(t.rootfd, filepath.Dir(cur), how)
			if err != nil {
				return -1, fmt.Errorf("mount point %s: %w", p, err)
			}
			f, err := unix.Openat(pfd, part, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
			unix.Close(pfd)
			if err != nil && err != unix.EEXIST {
				return -1, fmt.Errorf("mount point %s: %w", p, err)
			}
			if err == nil {
				unix.Close(f)
			}
			break
		}
		pdir := filepath.Dir(cur)
		if pdir == "." {
			pdir = ""
		}
		var pfd int
		var err error
		if pdir == "" {
			pfd, err = unix.Dup(t.rootfd)
		} else {
			pfd, err = unix.Openat2(t.rootfd, pdir, how)
		}
		if err != nil {
			return -1, fmt.Errorf("mount point %s: %w", p, err)
		}
		err = unix.Mkdirat(pfd, part, 0o755)
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("mount point %s: %w", p, err)
		}
	}
	fd, err := unix.Openat2(t.rootfd, rel, how)
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", p, err)
	}
	return fd, nil
}

// attach moves a detached mount onto p. A mount point the host replaced
// by rename meanwhile (useradd rewrites /etc/shadow so) is unlinked, and
// move_mount onto it fails with ENOENT: p is resolved again, a few times.
func (t *tree) attach(mfd int, p string, dir bool) error {
	for try := 0; ; try++ {
		tfd, err := t.mountpoint(p, dir)
		if err != nil {
			return err
		}
		err = unix.MoveMount(mfd, "", tfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(tfd)
		if err == unix.ENOENT && try < 20 { // each try is microseconds; CI lost 4 in a row to two renaming loops
			continue
		}
		if err != nil {
			return fmt.Errorf("move_mount %s: %w", p, err)
		}
		t.placed = append(t.placed, p)
		return nil
	}
}

// mountFS mounts a fresh filesystem (tmpfs, proc, devpts) on p through
// /proc/self/fd of the strictly resolved target.
func (t *tree) mountFS(fstype, p string, flags uintptr, data string) error {
	tfd, err := t.mountpoint(p, true)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if err := unix.Mount(fstype, fmt.Sprintf("/proc/self/fd/%d", tfd), fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, p, err)
	}
	t.placed = append(t.placed, p)
	return nil
}

// buildTree clones every bind source, mounts a tmpfs root at base and
// assembles the tree there. Sources are cloned before anything is mounted
// so that mounts over /tmp cannot hide a grant below /tmp.
// idfds are the supervisor's clones for the preCloned binds, in order.
func buildTree(base string, mounts []MountSpec, uid, gid int, idfds []int) (*tree, error) {
	clones := make(map[int]int)
	defer func() {
		for _, fd := range clones {
			unix.Close(fd)
		}
	}()
	for i, m := range mounts {
		if m.Kind != MountBind && m.Kind != MountTrust && m.Kind != MountCredential && m.Kind != MountGrants {
			continue
		}
		if m.preCloned() {
			if len(idfds) == 0 {
				return nil, fmt.Errorf("%s: the supervisor's clone of %s is missing", m.Path, m.Source)
			}
			clones[i], idfds = idfds[0], idfds[1:]
			continue
		}
		fd, err := cloneTree(m.Source, m.ReadOnly, false)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", m.Path, m.Field, err)
		}
		clones[i] = fd
	}
	if err := unix.Mount("corral-root", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return nil, fmt.Errorf("mount root tmpfs: %w", err)
	}
	rootfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	t := &tree{base: base, rootfd: rootfd, synthetic: []string{"/"}, binds: map[string]bool{}}
	owner := fmt.Sprintf("uid=%d,gid=%d", uid, gid)
	for i, m := range mounts {
		var err error
		switch m.Kind {
		case MountBind:
			err = t.attach(clones[i], m.Path, m.Dir)
			t.binds[m.Path] = true
		case MountTrust:
			err = t.trust(clones[i], m)
		case MountCredential:
			err = t.credential(clones[i], m)
		case MountGrants:
			// The slot holder's slave: attached as it is (its
			// propagation is never changed here).
			if in := t.enclosing(m.Path); !t.isSynthetic(in) {
				err = fmt.Errorf("the grant slots would be on %s, not the sandbox's own tree", in)
			} else {
				err = t.attach(clones[i], m.Path, true)
			}
		case MountTmpfs:
			data := fmt.Sprintf("mode=%o,%s", m.Mode, owner)
			if m.Size > 0 {
				data += fmt.Sprintf(",size=%d", m.Size)
			}
			err = t.mountFS("tmpfs", m.Path, unix.MS_NOSUID|unix.MS_NODEV, data)
			t.synthetic = append(t.synthetic, m.Path)
		case MountMask:
			err = t.mask(m)
		case MountProc:
			err = t.proc(m.Path)
		case MountDev:
			err = t.dev(m.Path)
		case MountSymlink:
			err = t.symlink(m)
		default:
			err = fmt.Errorf("unknown mount kind %q", m.Kind)
		}
		if err != nil {
			unix.Close(rootfd)
			where := m.Path
			if where == "" {
				where = string(m.Kind)
			}
			return nil, fmt.Errorf("%s (%s): %w", where, m.Field, err)
		}
	}
	return t, nil
}

// trust binds a trust file (the detached read-only mount fd) at m.Path,
// when set, then over each of m.Over that resolves to a file of a grant:
// symlinks are followed within the new root only (RESOLVE_IN_ROOT), as
// the workload's own lookups will be, so a link never leads outside the
// granted trees; a path that is absent, not a regular file, unreadable
// (a denied path's mask) or not on a grant's bind (proc, dev, a private
// tmpfs, another trust file) is left alone. It comes last, over every
// other mount. Placing the bundle nowhere is an error; the Java store
// (m.Store) may go nowhere.
func (t *tree) trust(fd int, m MountSpec) error {
	what, placed := "the CA bundle", &t.trusted
	if m.Store {
		what, placed = "the Java trust store", &t.stored
	}
	first := -1 // the first place (O_PATH), cloned for the others
	defer func() {
		if first >= 0 {
			unix.Close(first)
		}
	}()
	place := func(p string, attach func(mfd int) error) error {
		mfd := fd
		if first >= 0 {
			c, err := unix.OpenTree(first, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
			if err != nil {
				return fmt.Errorf("open_tree %s for %s: %w", what, p, err)
			}
			defer unix.Close(c)
			if err := unix.MountSetattr(c, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
				return fmt.Errorf("mount_setattr %s: %w", p, err)
			}
			mfd = c
		}
		if err := attach(mfd); err != nil {
			return err
		}
		if first < 0 {
			f, err := unix.Openat2(t.rootfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolveStrict})
			if err != nil {
				return fmt.Errorf("%s at %s: %w", what, p, err)
			}
			first = f
		}
		return nil
	}
	if m.Path != "" {
		if err := place(m.Path, func(mfd int) error { return t.attach(mfd, m.Path, false) }); err != nil {
			return err
		}
		*placed = append(*placed, m.Path)
	}
	done := map[string]bool{}
	for _, o := range m.Over {
		rfd, p, ok := t.trustTarget(o)
		if !ok || done[p] {
			if rfd >= 0 {
				unix.Close(rfd)
			}
			continue
		}
		done[p] = true
		err := place(p, func(mfd int) error {
			if err := unix.MoveMount(mfd, "", rfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
				return fmt.Errorf("move_mount %s (for %s): %w", p, o, err)
			}
			return nil
		})
		unix.Close(rfd)
		if err != nil {
			return err
		}
		t.placed = append(t.placed, p)
		*placed = append(*placed, o)
	}
	if len(*placed) == 0 && !m.Store {
		return fmt.Errorf("the CA bundle has nowhere to go: %s cannot be made and none of %s is a file in the sandbox", provider.TrustBundlePath, strings.Join(m.Over, ", "))
	}
	return nil
}

// trustTarget resolves o in the new root, symlinks followed within it:
// an O_PATH fd of what it names and that path inside, ok when it is a
// readable regular file on a grant's bind (not yet covered).
func (t *tree) trustTarget(o string) (fd int, inside string, ok bool) {
	fd, err := unix.Openat2(t.rootfd, strings.TrimPrefix(o, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return -1, "", false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o444 == 0 {
		return fd, "", false
	}
	// Where it is: the fd's path below base, the new root.
	at, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	rel, within := strings.CutPrefix(at, strings.TrimSuffix(t.base, "/")+"/")
	if err != nil || !within {
		return fd, "", false
	}
	inside = "/" + rel
	// The innermost mount holding it must be a grant's bind.
	holder := ""
	for _, m := range t.placed {
		if policy.Within(inside, m) && len(m) > len(holder) {
			holder = m
		}
	}
	return fd, inside, t.binds[holder]
}

// symlink creates a symlink in a directory Corral made (never on a host
// bind).
func (t *tree) symlink(m MountSpec) error {
	parent := filepath.Dir(m.Path)
	if !t.isSynthetic(parent) && !t.isSynthetic(t.enclosing(parent)) {
		return fmt.Errorf("symlink %s: parent is not a corral mount", m.Path)
	}
	pfd, err := t.mountpoint(parent, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(m.Source, pfd, filepath.Base(m.Path)); err != nil && err != unix.EEXIST {
		return fmt.Errorf("symlink %s: %w", m.Path, err)
	}
	return nil
}

// mask hides a denied path: an empty read-only tmpfs with mode 000 for a
// directory, a mode-000 empty file for a file, so reads and writes both fail
// (EACCES / EROFS) instead of succeeding into a scratch space.
func (t *tree) mask(m MountSpec) error {
	if m.Dir {
		return t.mountFS("tmpfs", m.Path, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000,size=4k,nr_inodes=2")
	}
	// A file: bind the mode-000 file kept in the root tmpfs.
	const hidden = ".corral-masked"
	if err := ensureMaskFile(t.rootfd, hidden); err != nil {
		return err
	}
	fd, err := unix.OpenTree(t.rootfd, hidden, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree mask: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return fmt.Errorf("mount_setattr mask: %w", err)
	}
	return t.attach(fd, m.Path, false)
}

func ensureMaskFile(rootfd int, name string) error {
	f, err := unix.Openat(rootfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil && err != unix.EEXIST {
		return fmt.Errorf("mask file: %w", err)
	}
	if err == nil {
		unix.Close(f)
	}
	return nil
}

// remountRO makes the mount at the current root read-only (not recursive:
// submounts keep their own flags).
func remountRO(path string) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("read-only %s: %w", path, err)
	}
	return nil
}

// procMasked are procfs entries hidden like Docker and runc do: kernel
// memory, keys and timers that leak host information.
var procMasked = []string{"kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger", "kallsyms"}

func (t *tree) proc(p string) error {
	if err := t.mountFS("proc", p, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	// /proc/sys and friends read-only.
	for _, sub := range []string{"sys", "bus", "fs", "irq"} {
		sp := filepath.Join(p, sub)
		fd, err := unix.Openat2(t.rootfd, strings.TrimPrefix(sp, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveStrict})
		if err != nil {
			continue // absent on this kernel
		}
		cfd, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", sp, err)
		}
		err = unix.MountSetattr(cfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
		if err == nil {
			err = t.attach(cfd, sp, true)
		}
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	nullfd, err := cloneTree("/dev/null", true, true)
	if err != nil {
		return err
	}
	defer unix.Close(nullfd)
	for _, name := range procMasked {
		sp := filepath.Join(p, name)
		pfd, err := unix.Openat2(t.rootfd, strings.TrimPrefix(sp, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveStrict})
		if err != nil {
			continue // absent on this kernel
		}
		unix.Close(pfd)
		cfd, err := unix.OpenTree(nullfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		if err != nil {
			return fmt.Errorf("mask %s: %w", sp, err)
		}
		err = t.attach(cfd, sp, false)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// devNodes are the device files bound into the minimal /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

func (t *tree) dev(p string) error {
	if err := t.mountFS("tmpfs", p, unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	t.synthetic = append(t.synthetic, p)
	for _, n := range devNodes {
		fd, err := cloneTree("/dev/"+n, false, true)
		if err != nil {
			return err
		}
		err = t.attach(fd, filepath.Join(p, n), false)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	pts := filepath.Join(p, "pts")
	if err := t.mountFS("devpts", pts, unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	shm := filepath.Join(p, "shm")
	if err := t.mountFS("tmpfs", shm, unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return err
	}
	dfd, err := unix.Openat2(t.rootfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveStrict})
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	links := map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "core": "/proc/kcore"}
	names := make([]string, 0, len(links))
	for n := range links {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == "core" {
			continue
		}
		if err := unix.Symlinkat(links[n], dfd, n); err != nil && err != unix.EEXIST {
			return fmt.Errorf("/dev/%s: %w", n, err)
		}
	}
	return nil
}

// pivot makes the tree the root and detaches the old root. It uses the
// pivot_root(".", ".") idiom from pivot_root(2).
func (t *tree) pivot() error {
	if err := unix.Fchdir(t.rootfd); err != nil {
		// O_PATH fds allow fchdir since Linux 3.5.
		return fmt.Errorf("chdir new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	unix.Close(t.rootfd)
	t.rootfd = -1
	return nil
}
