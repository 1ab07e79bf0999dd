//go:build linux

package linux

//go:generate sh gen_init.sh

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// embeddedInit is the small sandbox init (./initprog) when `go generate
// ./provider/linux` embedded it (initbin_linux.go); empty otherwise.
var embeddedInit string

// initExe is the embedded init as a file for Start to pass to init's
// clone and execute there (through /proc/self/fd: see initCmd), copied
// once per process into a sealed memfd (memfd_create(2), fcntl
// F_ADD_SEALS); or nil and why init is corral's own binary
// (/proc/self/exe, the same InitMain): nothing is embedded, a build with
// test hooks (their init must be this binary: testhook_corraltest.go),
// or the kernel will not execute a memfd (vm.memfd_noexec 2).
var initExe = sync.OnceValues(func() (*os.File, string) {
	switch {
	case embeddedInit == "":
		return nil, "no embedded init (go generate ./provider/linux builds one)"
	case testHooks:
		return nil, "a build with test hooks runs its own init"
	}
	if b, err := os.ReadFile("/proc/sys/vm/memfd_noexec"); err == nil && strings.TrimSpace(string(b)) == "2" {
		return nil, "vm.memfd_noexec is 2: no memfd may be executed"
	}
	fd, err := sealedInit()
	if err != nil {
		return nil, "embedded init: " + err.Error()
	}
	return os.NewFile(uintptr(fd), "corral-init"), "" // kept for the process's life
})

// initCmd sets cmd (its ExtraFiles chosen) to execute the sandbox init:
// the embedded one passed as the last of the files, at the fd the child
// has it at when it calls execve (Go's fork moves the files to 3, 4, ...
// first, and a number of this process's own could have been taken by one
// of them), or /proc/self/exe. why is "" for the embedded init.
func initCmd(cmd *exec.Cmd) (why string) {
	f, why := initExe()
	if f == nil {
		cmd.Path = "/proc/self/exe"
		return why
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	cmd.Path = "/proc/self/fd/" + strconv.Itoa(2+len(cmd.ExtraFiles))
	return ""
}

// mfdExec is MFD_EXEC (Linux 6.3, include/uapi/linux/memfd.h): an
// executable memfd where vm.memfd_noexec would make it not so.
const mfdExec = 0x10

// sealedInit returns a read-only, close-on-exec fd of a memfd holding
// embeddedInit, sealed against every change (F_SEAL_WRITE, SHRINK, GROW,
// SEAL). No fork of this process sees the memfd open for writing
// (syscall.ForkLock, as internal/execfile): an exec of it would fail with
// ETXTBSY while any process held it so.
func sealedInit() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	rw, err := unix.MemfdCreate("corral-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|mfdExec)
	if errors.Is(err, unix.EINVAL) { // before Linux 6.3: every memfd is executable
		rw, err = unix.MemfdCreate("corral-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(rw)
	if err := copyEmbedded(rw, embeddedInit); err != nil {
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(rw), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return -1, fmt.Errorf("seal: %w", err)
	}
	ro, err := unix.Open("/proc/self/fd/"+strconv.Itoa(rw), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reopen read-only: %w", err)
	}
	return ro, nil
}

// copyEmbedded writes data, a string in this binary's read-only data, to
// fd: by sendfile(2) from the binary's file at the offset the mapping
// holding it has (/proc/self/maps), so that the page cache is copied and
// this process touches none of the pages (each one it read would count
// in its RSS); what sendfile did not copy, by write(2).
func copyEmbedded(fd int, data string) error {
	b := unsafe.Slice(unsafe.StringData(data), len(data))
	if off, ok := fileOffset(uintptr(unsafe.Pointer(&b[0])), len(b)); ok {
		if exe, err := unix.Open("/proc/self/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(exe)
			for len(b) > 0 { // sendfile advances fd's offset, as write does
				w, err := unix.Sendfile(fd, exe, &off, len(b))
				if err != nil || w == 0 {
					break
				}
				b = b[w:]
			}
		}
	}
	for len(b) > 0 {
		w, err := unix.Write(fd, b)
		if err != nil {
			return fmt.Errorf("write the embedded init: %w", err)
		}
		b = b[w:]
	}
	return nil
}

// fileOffset is where in /proc/self/exe the n bytes at addr are, from the
// file-backed mapping of the executable that holds them.
func fileOffset(addr uintptr, n int) (int64, bool) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, false
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || strings.Join(fs[5:], " ") != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fs[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if uint64(addr) >= start && uint64(addr)+uint64(n) <= end {
			return int64(off + uint64(addr) - start), true
		}
	}
	return 0, false
}
