//go:build linux

package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/provider"
)

// The slot holder: the process that mounts live folder grants (README
// of the consent experiment, §2 (B); mount_namespaces(7)). It is this
// binary run as SlotsArg DIR by the sandbox's supervisor, in a mount
// namespace of its own, M0 (root: CLONE_NEWNS; an unprivileged caller:
// CLONE_NEWUSER|CLONE_NEWNS mapping only its own uid and gid, with
// CAP_SYS_ADMIN and CAP_DAC_OVERRIDE ambient, there only), made a slave
// of the host's so nothing it mounts reaches the host. In M0 it mounts the slot on DIR/slot (DIR:
// the sandbox's state directory, 0700; grants.MountSlot: a small shared
// tmpfs with ro/ and rw/) and sends the supervisor a detached recursive
// clone of it, read-only and a slave (mount_setattr), which init
// attaches at provider.GrantSlots after making / private. Then it serves
// the supervisor's requests on its socket (fd 3, SOCK_SEQPACKET, one JSON
// message each way per request):
//
//	grant   grants.Slot.Grant: Source opened with openat2
//	        (RESOLVE_NO_SYMLINKS), refused unless its dev and ino are
//	        those asked for, cloned recursively, nosuid and nodev (+
//	        read-only) recursively, read-only clones over ReadOnlyWithin
//	        and empty read-only masks over Masks placed on the detached
//	        tree (Linux ≥ 6.15; before, such a grant is refused), one
//	        move_mount onto slot/{ro,rw}/<label>: the sandbox's slave
//	        receives the whole tree by propagation, and the kernel locks
//	        it there (MNT_LOCK_READONLY, MNT_LOCKED children: the
//	        sandbox's user namespace is less privileged)
//	revoke  grants.Slot.Revoke: umount2(MNT_DETACH) of slot/{ro,rw}/<label>
//	        (propagated to the sandbox), then rmdir
//
// Anything that fails leaves nothing of the grant. The holder dies with
// its supervisor (Pdeathsig, and EOF on its socket): M0 goes with it, so
// nothing is left on the host even after a SIGKILL.

// SlotsArg is argv[1] that makes the corral binary a sandbox's slot
// holder (SlotsMain).
const SlotsArg = "__corral_slots"

// slotsFD is the holder's socket (ExtraFiles[0]).
const slotsFD = 3

// slotReq is one request to the slot holder.
type slotReq struct {
	Op    string                `json:"op"` // grant, revoke
	Grant *provider.FolderGrant `json:"grant,omitempty"`
	Label string                `json:"label,omitempty"`
	RO    bool                  `json:"ro,omitempty"` // revoke: under ro/ (else rw/)
}

// slotReply answers a slotReq (and, Ready, the start: the slot's clone
// comes with it).
type slotReply struct {
	Ready bool          `json:"ready,omitempty"`
	OK    bool          `json:"ok,omitempty"`
	Code  provider.Code `json:"code,omitempty"`
	Error string        `json:"error,omitempty"`
	// Absent are the Masks and ReadOnlyWithin paths that did not exist
	// when the grant was made: nothing to hide or protect then.
	Absent []string `json:"absent,omitempty"`
}

// slotHolder is the supervisor's side of a slot holder.
type slotHolder struct {
	mu   sync.Mutex
	sock *os.File
	cmd  *exec.Cmd
	done chan struct{} // closed once the holder is reaped
}

// startSlots starts the slot holder of state directory dir (making
// dir/slot, 0700), and returns it with the fd of the slot's clone for
// init (the caller closes it).
func startSlots(dir string) (*slotHolder, int, error) {
	if err := os.Mkdir(filepath.Join(dir, "slot"), 0o700); err != nil {
		return nil, -1, fmt.Errorf("slot holder: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("slot holder: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "corral-slots-child")
	defer child.Close()
	// Non-blocking, so that os.File's poller gives reads a deadline.
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		return nil, -1, fmt.Errorf("slot holder: %w", err)
	}
	h := &slotHolder{sock: os.NewFile(uintptr(pair[0]), "corral-slots"), done: make(chan struct{})}
	attr := &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if uid, gid := os.Getuid(), os.Getgid(); uid != 0 {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		// CAP_DAC_OVERRIDE: a file mask is made in a mode-000 tmpfs.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE}
	}
	h.cmd = &exec.Cmd{Path: "/proc/self/exe", Args: []string{"corral-slots", SlotsArg, dir}, Env: []string{}, ExtraFiles: []*os.File{child}, Stderr: os.Stderr, SysProcAttr: attr}
	started := make(chan error, 1)
	// Pdeathsig fires when the thread that forked exits: it stays
	// locked until the holder is gone (as Start does for init).
	go func() {
		runtime.LockOSThread()
		if err := h.cmd.Start(); err != nil {
			started <- err
			close(h.done)
			return
		}
		started <- nil
		_ = h.cmd.Wait()
		close(h.done)
	}()
	if err := <-started; err != nil {
		h.sock.Close()
		return nil, -1, fmt.Errorf("slot holder: %w", err)
	}
	child.Close()
	var r slotReply
	fds, err := h.recv(&r, 30*time.Second)
	if err == nil && (!r.Ready || len(fds) != 1) {
		err = errors.New(r.Error)
		if r.Error == "" {
			err = errors.New("it sent no slot")
		}
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		h.stop()
		return nil, -1, fmt.Errorf("slot holder: %w", err)
	}
	return h, fds[0], nil
}

// recv reads one reply into r, with the fds it carries, waiting at most
// wait.
func (h *slotHolder) recv(r *slotReply, wait time.Duration) ([]int, error) {
	_ = h.sock.SetReadDeadline(time.Now().Add(wait))
	buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(4))
	raw, err := h.sock.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n, oobn int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	fds := rightsOf(oob[:oobn])
	if n == 0 {
		return fds, errors.New("it ended")
	}
	return fds, json.Unmarshal(buf[:n], r)
}

// call sends req and waits for its reply; one request at a time.
func (h *slotHolder) call(req slotReq) (slotReply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(req)
	if _, err := h.sock.Write(b); err != nil {
		return slotReply{}, fmt.Errorf("slot holder: %w", err)
	}
	var r slotReply
	fds, err := h.recv(&r, time.Minute)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		return slotReply{}, fmt.Errorf("slot holder: %w", err)
	}
	return r, nil
}

// stop ends the holder: its socket closed (it exits at EOF), then
// SIGKILL if it has not within a second; it waits until it is reaped.
func (h *slotHolder) stop() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.sock.Close()
	h.mu.Unlock()
	select {
	case <-h.done:
		return
	case <-time.After(time.Second):
	}
	if h.cmd.Process != nil {
		_ = h.cmd.Process.Kill()
	}
	<-h.done
}

// SlotsMain is the slot holder: argv is corral SlotsArg DIR, its socket
// fd slotsFD. It never returns.
func SlotsMain() {
	unix.CloseOnExec(slotsFD)
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getppid() == 1 { // the supervisor died before the prctl
		os.Exit(1)
	}
	fail := func(err error) {
		b, _ := json.Marshal(slotReply{Error: err.Error()})
		_ = unix.Sendmsg(slotsFD, b, nil, nil, 0)
		os.Exit(1)
	}
	if len(os.Args) != 3 || !filepath.IsAbs(os.Args[2]) {
		fail(errors.New("usage: corral " + SlotsArg + " DIR"))
	}
	h, clone, err := newHolder(filepath.Clean(os.Args[2]))
	if err != nil {
		fail(err)
	}
	b, _ := json.Marshal(slotReply{Ready: true})
	if err := unix.Sendmsg(slotsFD, b, unix.UnixRights(clone), nil, 0); err != nil {
		os.Exit(1)
	}
	unix.Close(clone)
	buf := make([]byte, 64<<10)
	for {
		n, _, _, _, err := unix.Recvmsg(slotsFD, buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			os.Exit(0) // the supervisor is gone: so is M0 with us
		}
		var req slotReq
		var r slotReply
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			r = slotReply{Code: provider.CodeInternal, Error: "bad request: " + err.Error()}
		} else {
			r = h.serve(req)
		}
		b, _ := json.Marshal(r)
		if err := unix.Sendmsg(slotsFD, b, nil, nil, 0); err != nil {
			os.Exit(1)
		}
	}
}

// holder is the slot holder's state in M0.
type holder struct{ slot *grants.Slot }

// newHolder makes M0 a slave of the host's mounts, mounts the slot in
// dir, and returns the holder with the slot's detached clone for the
// sandbox.
func newHolder(dir string) (*holder, int, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return nil, -1, fmt.Errorf("make / a slave: %w", err)
	}
	slot, err := grants.MountSlot(filepath.Join(dir, "slot"))
	if err != nil {
		return nil, -1, err
	}
	clone, err := unix.OpenTree(unix.AT_FDCWD, slot.Dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, -1, fmt.Errorf("open_tree the slot: %w", err)
	}
	// The sandbox's copy: read-only (nothing inside makes or changes a
	// slot directory, whoever owns it), and a slave, so grants come in
	// and nothing goes back.
	if err := unix.MountSetattr(clone, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC, Propagation: unix.MS_SLAVE}); err != nil {
		unix.Close(clone)
		return nil, -1, fmt.Errorf("mount_setattr the slot's clone: %w", err)
	}
	return &holder{slot: slot}, clone, nil
}

func (h *holder) serve(req slotReq) slotReply {
	var err error
	var absent []string
	switch req.Op {
	case "grant":
		if req.Grant == nil {
			err = errors.New("grant: nothing to grant")
			break
		}
		absent, err = h.slot.Grant(grants.Request(*req.Grant))
	case "revoke":
		err = h.slot.Revoke(req.Label, req.RO)
	default:
		err = fmt.Errorf("unknown request %q", req.Op)
	}
	var refused *grants.RefusedError
	switch {
	case errors.As(err, &refused):
		return slotReply{Code: provider.CodePolicyRejected, Error: refused.Msg}
	case err != nil:
		return slotReply{Code: provider.CodeInternal, Error: err.Error()}
	}
	return slotReply{OK: true, Absent: absent}
}
