//go:build linux

package linux

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/setid"
	"github.com/corral-sandbox/corral/internal/startup"
)

// HoldArg is argv[1] that makes the corral binary block on stdin: the
// supervisor uses it to create the user namespace an idmapped mount needs.
const HoldArg = "__corral_hold"

// HoldMain blocks until stdin closes, then exits.
func HoldMain() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// swapMap maps id 0 and id w onto each other and every other id onto
// itself; as an idmapped mount's mapping it makes files owned by root on
// disk appear owned by w, and files w creates land on disk as root
// (Documentation/filesystems/idmappings.rst).
func swapMap(w int) []syscall.SysProcIDMap {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: w, Size: 1}, {ContainerID: w, HostID: 0, Size: 1}}
	if w > 1 {
		m = append(m, syscall.SysProcIDMap{ContainerID: 1, HostID: 1, Size: w - 1})
	}
	const max = 4294967294 // (uid_t)-1 is invalid
	if w < max {
		m = append(m, syscall.SysProcIDMap{ContainerID: w + 1, HostID: w + 1, Size: max - w})
	}
	return m
}

// idmapUserns returns an fd of a user namespace with swapMap(uid) and
// swapMap(gid). A child created in it holds it just long enough: Start
// returns once the maps are written and the child has exec'd, the fd is
// opened, and the child is killed and reaped in the background. The
// child is traced (PTRACE_TRACEME), so it stops at its exec before it
// runs an instruction (ptrace(2): a SIGTRAP after a successful execve):
// a holder that ran would be one more Go runtime starting beside init's.
// Where ptrace is refused (Yama's ptrace_scope 3, a seccomp filter) the
// holder runs, blocked on its stdin (HoldMain).
func idmapUserns(uid, gid int) (int, error) {
	fd, err := idmapHolder(uid, gid, true)
	if err != nil {
		fd, err = idmapHolder(uid, gid, false)
	}
	return fd, err
}

func idmapHolder(uid, gid int, traced bool) (int, error) {
	cmd := exec.Command("/proc/self/exe", HoldArg)
	cmd.Args[0] = "corral-idmap"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: swapMap(uid),
		GidMappings: swapMap(gid),
		Pdeathsig:   syscall.SIGKILL,
		Ptrace:      traced,
	}
	if !traced {
		if _, err := cmd.StdinPipe(); err != nil { // blocks HoldMain until killed
			return -1, err
		}
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("idmap user namespace: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	_ = cmd.Process.Kill()
	if traced {
		// Wait would return at the child's trace stop; reap its exit.
		go func() {
			pid := cmd.Process.Pid
			for {
				var ws unix.WaitStatus
				_, err := unix.Wait4(pid, &ws, 0, nil)
				if err == unix.EINTR {
					continue
				}
				if err != nil || ws.Exited() || ws.Signaled() {
					break
				}
			}
			_ = cmd.Process.Release()
		}()
	} else {
		go func() { _ = cmd.Wait() }()
	}
	if err != nil {
		return -1, fmt.Errorf("idmap user namespace: %w", err)
	}
	startup.Add("supervisor", "linux: idmap user namespace made")
	return fd, nil
}

// preClones prepares the preCloned mounts as detached mounts, in order:
// the IDMap ones idmapped, the HostClone ones plain read-only clones, the
// MountGrants one a duplicate of slot (the slot holder's clone). The
// caller sends the fds to init and closes them.
func preClones(mounts []MountSpec, uid, gid, slot int) ([]int, error) {
	ns := -1
	defer func() {
		if ns >= 0 {
			unix.Close(ns)
		}
	}()
	var fds []int
	for _, m := range mounts {
		if !m.preCloned() {
			continue
		}
		var err error
		if m.IDMap && ns < 0 {
			ns, err = idmapUserns(uid, gid)
		}
		fd := -1
		switch {
		case err != nil:
		case m.Kind == MountGrants && slot < 0:
			err = fmt.Errorf("%s: the slot holder sent no slot", m.Path)
		case m.Kind == MountGrants:
			fd, err = unix.FcntlInt(uintptr(slot), unix.F_DUPFD_CLOEXEC, 0)
		default:
			fd, err = cloneTree(m.Source, m.ReadOnly, false)
			if err == nil && m.IDMap && !m.ReadOnly {
				// The plan vetted the path; the file this clone holds
				// is vetted again, whatever the plan took it for.
				sid, serr := setid.FD(fd)
				if err = vetSetIDFile(m.Source, sid, serr); err != nil {
					unix.Close(fd)
				}
			}
		}
		if err == nil && m.IDMap {
			err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)})
			if err != nil {
				unix.Close(fd)
				err = fmt.Errorf("idmapped mount of %s (needs a filesystem with idmap support: ext4, xfs, btrfs, tmpfs ≥ 6.3): %w", m.Source, err)
			}
		}
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}
