//go:build linux

package grants

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/procstat"
)

// Holder is one process holding a mount: the fields of provider.Holder
// (a struct conversion either way). FD is the fd's number, -1 for the
// cwd, -2 for the root.
type Holder struct {
	PID    int
	FD     int
	Path   string
	Exe    string
	Killed bool
}

// PIDs are the host pids of the processes in the pid namespace of init
// (a sandbox's PID 1 by its host pid), init first, the rest ascending;
// none when init is gone.
func PIDs(initPID int) []int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if err != nil {
		return nil
	}
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == initPID {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return append([]int{initPID}, out...)
}

// Holders lists, among the processes of init's pid namespace (PIDs), each
// fd whose /proc/PID/fdinfo mnt_id is one of ids, and a cwd or root on
// one of them (statx STATX_MNT_ID of /proc/PID/cwd, /root; proc(5),
// statx(2)), ordered by pid then fd (root -2, cwd -1, then the fds). The mount ids are host-unique, so a
// revoked grant's ids (read back while it was mounted) find what still
// holds its detached tree.
func Holders(initPID int, ids []int) []Holder {
	if len(ids) == 0 {
		return nil
	}
	var out []Holder
	for _, pid := range PIDs(initPID) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, e := range fds {
			fd, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if id, ok := fdMount(pid, fd); ok && slices.Contains(ids, id) {
				p, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
				out = append(out, Holder{PID: pid, FD: fd, Path: p, Exe: exe})
			}
		}
		for _, c := range []struct {
			fd   int
			name string
		}{{-1, "cwd"}, {-2, "root"}} {
			var stx unix.Statx_t
			if unix.Statx(unix.AT_FDCWD, fmt.Sprintf("/proc/%d/%s", pid, c.name), unix.AT_STATX_SYNC_AS_STAT, unix.STATX_MNT_ID, &stx) != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
				continue
			}
			if slices.Contains(ids, int(stx.Mnt_id)) {
				p, _ := os.Readlink(fmt.Sprintf("/proc/%d/%s", pid, c.name))
				out = append(out, Holder{PID: pid, FD: c.fd, Path: p, Exe: exe})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Holder) int {
		if a.PID != b.PID {
			return a.PID - b.PID
		}
		return a.FD - b.FD
	})
	return out
}

// fdMount is the mnt_id line of /proc/PID/fdinfo/FD (proc(5)).
func fdMount(pid, fd int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil
		}
	}
	return 0, false
}

// Kill sends SIGKILL to each distinct pid of hs through a pidfd (a reused
// pid is never hit) and waits, up to 5 s each, until it has exited; then
// marks Killed those that no longer hold any of ids.
func Kill(initPID int, ids []int, hs []Holder) []Holder {
	var pids []int
	for _, h := range hs {
		if !slices.Contains(pids, h.PID) {
			pids = append(pids, h.PID)
		}
	}
	for _, pid := range pids {
		killPID(pid)
	}
	var still []int
	for _, h := range Holders(initPID, ids) {
		still = append(still, h.PID)
	}
	out := slices.Clone(hs)
	for i := range out {
		out[i].Killed = !slices.Contains(still, out[i].PID)
	}
	return out
}

func killPID(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for time.Now().Before(deadline) {
		if n, err := unix.Poll(pfd, 100); n > 0 || err != nil && err != unix.EINTR {
			break
		}
	}
	// Exited, maybe not reaped: wait until it is a zombie or gone (its
	// fds closed).
	for time.Now().Before(deadline) {
		st, err := procstat.Read(pid)
		if err != nil || st.State == "Z" || st.State == "X" {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TCPPeer names the process that owns the client end of a loopback TCP
// connection in the network namespace of init: the socket bound to peer
// and connected to local (the accepted connection's remote and local
// addresses, as the accepting side's kernel reported them), found in
// /proc/INIT/net/tcp and tcp6 (proc(5)) by its inode, then the process of
// init's pid namespace holding an fd socket:[inode]. Several processes
// share one socket after a fork: ok only when exactly one holds it (an
// ambiguous peer is not guessed). exe is /proc/PID/exe as this process's
// mount namespace names it.
func TCPPeer(initPID int, peer, local *net.TCPAddr) (pid int, exe string, ok bool) {
	if initPID <= 0 || peer == nil || local == nil {
		return 0, "", false
	}
	inode := ""
	for _, t := range []string{"tcp", "tcp6"} {
		if inode = socketInode(fmt.Sprintf("/proc/%d/net/%s", initPID, t), peer, local); inode != "" {
			break
		}
	}
	if inode == "" {
		return 0, "", false
	}
	want := "socket:[" + inode + "]"
	found := 0
	for _, p := range PIDs(initPID) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
		for _, fd := range fds {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p, fd.Name())); err == nil && l == want {
				if found == 0 {
					pid = p
				}
				found++
				break
			}
		}
	}
	if found != 1 {
		return 0, "", false
	}
	exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return pid, exe, true
}

// socketInode is the inode of the socket of a /proc/net/tcp{,6} table
// bound to local and connected to remote, "" if none.
func socketInode(table string, local, remote *net.TCPAddr) string {
	f, err := os.Open(table)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[0] == "sl" {
			continue
		}
		l, okl := procAddr(fs[1])
		r, okr := procAddr(fs[2])
		if okl && okr && l.Port == local.Port && l.IP.Equal(local.IP) && r.Port == remote.Port && r.IP.Equal(remote.IP) {
			return fs[9]
		}
	}
	return ""
}

// procAddr parses a /proc/net/tcp address, e.g. "0100007F:0C39": the
// address as 32-bit words in the host's byte order, in hex, then the port
// in hex.
func procAddr(s string) (*net.TCPAddr, bool) {
	h, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(h)
	port, err2 := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || err2 != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, false
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	return &net.TCPAddr{IP: ip, Port: int(port)}, true
}
