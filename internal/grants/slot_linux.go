//go:build linux

package grants

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/mountinfo"
)

// Request is one folder grant to mount: the fields of
// provider.FolderGrant (a struct conversion either way).
type Request struct {
	Label          string
	Source         string
	Dev            uint64
	Ino            uint64
	ReadOnly       bool
	Masks          []string
	ReadOnlyWithin []string
}

// RefusedError is a grant the slot will not make as asked (a bad label,
// a label in use, a source that is not what was asked for, a mask that
// cannot be placed): the caller's policy-rejected case. Any other error
// of Grant is a mount that failed.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return e.Msg }

func refused(format string, args ...any) error {
	return &RefusedError{Msg: fmt.Sprintf(format, args...)}
}

// ValidLabel reports whether l can name a grant under a slot:
// [A-Za-z0-9._-], 1 to 64 bytes, not "." or "..".
func ValidLabel(l string) bool {
	if l == "" || len(l) > 64 || l == "." || l == ".." {
		return false
	}
	for _, c := range []byte(l) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// SlotFS is the source name of a slot's tmpfs in mountinfo.
const SlotFS = "corral-grants"

// Slot is a mounted slot: a small tmpfs at Dir, shared (MS_SHARED), with
// directories ro/ and rw/ (0755, owned by the caller) where grants are
// mounted at ro/<label> and rw/<label>. A sandbox whose grant directory
// is a slave of it (an rslave bind) receives each grant whole.
type Slot struct {
	Dir    string
	ro, rw int // O_PATH fds of ro/ and rw/
}

// beneath resolves below a directory fd, never through a symlink, a
// magic link or onto another mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

func openBeneath(dirfd int, name string, resolve uint64) (int, error) {
	return unix.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolve})
}

// MountSlot mounts a slot on dir, an existing empty directory whose
// parent only the caller can reach (0700): a tmpfs of 64 KiB, 4096
// inodes, nosuid, nodev, noexec, made shared, with ro/ and rw/. Needs
// CAP_SYS_ADMIN in the mount namespace's user namespace. On error
// nothing stays mounted.
func MountSlot(dir string) (*Slot, error) {
	if err := unix.Mount(SlotFS, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=4096"); err != nil {
		return nil, fmt.Errorf("mount the grant slot on %s: %w", dir, err)
	}
	s, err := setupSlot(dir)
	if err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return nil, err
	}
	return s, nil
}

func setupSlot(dir string) (*Slot, error) {
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return nil, fmt.Errorf("make the grant slot %s shared: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	for _, d := range []string{"ro", "rw"} {
		if err := unix.Mkdirat(fd, d, 0o755); err != nil {
			return nil, fmt.Errorf("grant slot %s: mkdir %s: %w", dir, d, err)
		}
	}
	return openSlot(dir, fd)
}

// OpenSlot is the slot already mounted on dir (by MountSlot, in an
// earlier process): dir must be the mount point of a tmpfs named SlotFS
// in this process's mount namespace, shared, holding ro/ and rw/.
func OpenSlot(dir string) (*Slot, error) {
	es, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	top, ok := Top(es, dir)
	var fs unix.Statfs_t
	if !ok || top.Root != "/" || !slices.ContainsFunc(top.Optional, func(o string) bool { return strings.HasPrefix(o, "shared:") }) ||
		unix.Statfs(dir, &fs) != nil || fs.Type != unix.TMPFS_MAGIC {
		return nil, fmt.Errorf("%s is not a mounted grant slot (a shared tmpfs)", dir)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return openSlot(dir, fd)
}

func openSlot(dir string, fd int) (*Slot, error) {
	s := &Slot{Dir: dir, ro: -1, rw: -1}
	var err error
	if s.ro, err = openBeneath(fd, "ro", beneath); err == nil {
		s.rw, err = openBeneath(fd, "rw", beneath)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("grant slot %s: %w", dir, err)
	}
	return s, nil
}

// Close closes the slot's descriptors; its mounts stay (Detach removes
// them).
func (s *Slot) Close() {
	for _, fd := range []int{s.ro, s.rw} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	s.ro, s.rw = -1, -1
}

func (s *Slot) dirfd(ro bool) (int, string) {
	if ro {
		return s.ro, "ro"
	}
	return s.rw, "rw"
}

// Grant mounts r at Dir/{ro,rw}/<label>: Source opened with openat2
// RESOLVE_NO_SYMLINKS (a symlink anywhere on the way is refused: the path
// asked for was canonical), refused unless its dev and ino are r's, cloned
// with its submounts (open_tree OPEN_TREE_CLONE|AT_RECURSIVE: nothing
// hidden under a submount shows), nosuid and nodev (and read-only for a
// read-only grant) on every mount of the clone, then — on the detached
// tree, before anything can see it — a read-only recursive clone of
// itself over each ReadOnlyWithin path and an empty read-only mask over
// each Mask (a mode-000 tmpfs on a directory, an empty mode-000 file on
// anything else), shallowest first, masks last; and one move_mount of
// the finished tree onto the label's new directory, so a slave receives
// it whole. It returns the masks and read-only paths absent from the
// source (nothing to place). Errors: *RefusedError, or the mount that
// failed; either way nothing of the grant is left.
func (s *Slot) Grant(r Request) ([]string, error) {
	if !ValidLabel(r.Label) {
		return nil, refused("grant label %q: want [A-Za-z0-9._-], 1 to 64 bytes, not . or ..", r.Label)
	}
	if !filepath.IsAbs(r.Source) || filepath.Clean(r.Source) != r.Source {
		return nil, refused("grant %s: the source %q is not a canonical absolute path", r.Label, r.Source)
	}
	src, err := unix.Openat2(unix.AT_FDCWD, r.Source, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, refused("grant %s: open %s: %v (a symlink on the way is refused)", r.Label, r.Source, err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return nil, fmt.Errorf("grant %s: stat %s: %w", r.Label, r.Source, err)
	}
	if st.Dev != r.Dev || st.Ino != r.Ino {
		return nil, refused("grant %s: %s changed since it was asked for (dev %d ino %d then, dev %d ino %d now): ask again", r.Label, r.Source, r.Dev, r.Ino, st.Dev, st.Ino)
	}
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("grant %s: open_tree %s: %w", r.Label, r.Source, err)
	}
	defer unix.Close(tree) // a detached tree goes with its last fd
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if r.ReadOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr}); err != nil {
		return nil, fmt.Errorf("grant %s: mount_setattr: %w", r.Label, err)
	}
	absent, err := place(tree, r)
	if err != nil {
		return nil, err
	}
	dfd, d := s.dirfd(r.ReadOnly)
	if err := unix.Mkdirat(dfd, r.Label, 0o755); err != nil {
		if err == unix.EEXIST {
			return nil, refused("grant label %q is in use in %s/", r.Label, d)
		}
		return nil, fmt.Errorf("grant %s: mkdir: %w", r.Label, err)
	}
	target, err := openBeneath(dfd, r.Label, beneath)
	if err == nil {
		err = unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(target)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, r.Label, unix.AT_REMOVEDIR)
		return nil, fmt.Errorf("grant %s: move_mount into the slot: %w", r.Label, err)
	}
	return absent, nil
}

// place puts r's read-only paths and masks on the detached tree (Grant).
// Mounting on a detached tree needs Linux 6.15; before, it is refused.
func place(tree int, r Request) ([]string, error) {
	type spot struct {
		path string
		mask bool
	}
	var ps []spot
	for _, p := range r.ReadOnlyWithin {
		ps = append(ps, spot{p, false})
	}
	for _, p := range r.Masks {
		ps = append(ps, spot{p, true})
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].mask != ps[j].mask {
			return !ps[i].mask
		}
		return strings.Count(ps[i].path, "/") < strings.Count(ps[j].path, "/")
	})
	var absent []string
	for _, p := range ps {
		what := "read-only path"
		if p.mask {
			what = "mask"
		}
		rel, err := filepath.Rel(r.Source, p.path)
		if err != nil || filepath.Clean(p.path) != p.path || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, refused("grant %s: %s %s is not inside %s", r.Label, what, p.path, r.Source)
		}
		fd, err := openBeneath(tree, rel, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err == unix.ENOENT {
			absent = append(absent, p.path)
			continue
		}
		if err == nil {
			err = over(fd, p.mask)
			unix.Close(fd)
		}
		if err != nil {
			if errors.Is(err, unix.EINVAL) {
				err = fmt.Errorf("%w (mounting on a detached tree needs Linux 6.15)", err)
			}
			return nil, refused("grant %s: the %s %s cannot be placed: %v", r.Label, what, p.path, err)
		}
	}
	return absent, nil
}

// over mounts over fd, an O_PATH fd in a detached tree: a mask (an empty
// read-only mode-000 tmpfs on a directory, an empty read-only mode-000
// file on anything else), or a read-only recursive clone of what is there.
func over(fd int, mask bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	var m int
	var err error
	switch {
	case !mask:
		if m, err = unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE); err == nil {
			err = unix.MountSetattr(m, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV})
		}
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		m, err = maskMount(false)
	default:
		m, err = maskMount(true)
	}
	if err != nil {
		if m > 0 {
			unix.Close(m)
		}
		return err
	}
	defer unix.Close(m)
	return unix.MoveMount(m, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// maskMount is a new detached read-only mount that shows nothing: an
// empty tmpfs of mode 000 (fsopen, fsconfig, fsmount:
// Documentation/filesystems/mount_api.rst), or, for file, a bind of an
// empty mode-000 file made in such a tmpfs.
func maskMount(file bool) (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"source", "corral-mask"}, {"mode", "000"}, {"size", "4k"}, {"nr_inodes", "4"}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("fsconfig %s=%s: %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	ro := uint64(unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC)
	if !file {
		m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, int(ro))
		if err != nil {
			return -1, fmt.Errorf("fsmount: %w", err)
		}
		return m, nil
	}
	root, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(root)
	f, err := unix.Openat(root, "mask", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("mask file: %w", err)
	}
	unix.Close(f)
	m, err := unix.OpenTree(root, "mask", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree the mask file: %w", err)
	}
	if err := unix.MountSetattr(m, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: ro}); err != nil {
		unix.Close(m)
		return -1, fmt.Errorf("mount_setattr the mask file: %w", err)
	}
	return m, nil
}

// Revoke detaches the grant at Dir/{ro,rw}/<label> (umount2 MNT_DETACH:
// its copies in every slave go with it; fds open on it keep working,
// the kernel has no revoke) and removes its directory. A label with no
// mount left is only removed. Errors: *RefusedError for a bad label.
func (s *Slot) Revoke(label string, ro bool) error {
	if !ValidLabel(label) {
		return refused("grant label %q: want [A-Za-z0-9._-], 1 to 64 bytes", label)
	}
	dfd, d := s.dirfd(ro)
	if err := unix.Unmount(filepath.Join(s.Dir, d, label), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("revoke %s: umount: %w", label, err)
	}
	if err := unix.Unlinkat(dfd, label, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return fmt.Errorf("revoke %s: rmdir: %w", label, err)
	}
	return nil
}

// Detach lazily unmounts (MNT_DETACH) every mount of this process's mount
// namespace at or below dir, shallowest first, and checks that none is
// left: a directory with a slot mounted in it must never be removed
// recursively (os.RemoveAll crosses mount points, and a read-write grant
// below it is a person's folder). An error when one stays.
func Detach(dir string) error {
	dir = filepath.Clean(dir)
	for range 8 { // mounts can stack: each pass takes the top ones
		es, err := mountinfo.Read("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var points []string
		for _, e := range es {
			if within(e.Point, dir) && !slices.ContainsFunc(points, func(p string) bool { return within(e.Point, p) }) {
				points = append(points, e.Point)
			}
		}
		if len(points) == 0 {
			return nil
		}
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				return fmt.Errorf("detach %s: %w", p, err)
			}
		}
	}
	return fmt.Errorf("mounts stay below %s after detaching them", dir)
}

// within is policy.Within for clean absolute paths (internal packages do
// not import policy).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Mounted reports whether anything is mounted at or below dir in this
// process's mount namespace.
func Mounted(dir string) bool {
	es, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return true // unknown: treat as mounted, never remove
	}
	return slices.ContainsFunc(es, func(e mountinfo.Entry) bool { return within(e.Point, filepath.Clean(dir)) })
}

// Top is the mount on top at point in es (mountinfo lists a mount after
// the one it covers), false when nothing is mounted there.
func Top(es []mountinfo.Entry, point string) (mountinfo.Entry, bool) {
	var top mountinfo.Entry
	ok := false
	for _, e := range es {
		if e.Point == point {
			top, ok = e, true
		}
	}
	return top, ok
}
