//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// P14: alternate syscall paths are refused.
func TestP14_Syscalls(t *testing.T) {
	allowed := map[string]bool{"EPERM": true, "ENOSYS": true, "EAFNOSUPPORT": true}
	calls := []string{"io_uring_setup", "socket_netlink_audit", "socket_netlink_kobject_uevent", "socket_packet",
		"socket_vsock", "socket_alg", "socket_bluetooth", "socketpair_packet", "unshare_newuser", "unshare_newns",
		"clone_newuser", "keyctl", "add_key", "bpf", "mount", "fsopen", "open_tree", "perf_event_open", "userfaultfd", "setns"}
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "p14")
		pol := writePolicy(t, id, policy{})
		res := corral(t, run{id: id, policy: pol, workdir: wd, args: []string{probeBin, "syscalls"}})
		assertCode(t, res, 0)
		for _, c := range calls {
			v, ok := lineValue(res.stdout, c)
			if !ok {
				t.Errorf("%s: not probed\n%s", c, res)
				continue
			}
			if !allowed[v] {
				t.Errorf("%s: %s, want EPERM/ENOSYS/EAFNOSUPPORT", c, v)
			}
		}
		// util-linux unshare is single-threaded, so unshare(2) is really
		// attempted (Go's runtime cannot unshare a user namespace).
		if _, err := os.Stat("/usr/bin/unshare"); err == nil {
			res := corral(t, run{id: id, policy: pol, workdir: wd, args: sh("unshare -U -r id && echo UNSHARED")})
			if res.code == 0 || strings.Contains(res.stdout, "UNSHARED") {
				t.Errorf("unshare -U -r succeeded inside\n%s", res)
			}
		}
	})
}

// P11: ptrace and process_vm_readv on PID 1 and on a sibling fail.
func TestP11_Ptrace(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "p11")
		pol := writePolicy(t, id, policy{})
		res := corral(t, run{id: id, policy: pol, workdir: wd,
			args: sh("sleep 30 & S=$!; sleep 0.2; " + probeBin + " ptrace 1 $S; echo SIB=$S; kill $S")})
		sib := ""
		for _, l := range strings.Split(res.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "SIB="); ok {
				sib = strings.TrimSpace(v)
			}
		}
		if sib == "" {
			t.Fatalf("no sibling pid\n%s", res)
		}
		for _, pid := range []string{"1", sib} {
			for _, op := range []string{"ptrace_attach", "ptrace_seize", "process_vm_readv"} {
				v, ok := lineValue(res.stdout, op+" "+pid)
				if !ok {
					t.Errorf("%s %s not probed\n%s", op, pid, res)
					continue
				}
				if !strings.HasPrefix(v, "EPERM") {
					t.Errorf("%s on pid %s: %s, want EPERM", op, pid, v)
				}
			}
		}
	})
}

// P10: TIOCSTI cannot push input into the user's terminal, with or without
// -t. The "user's shell" is a real sh on a pty the test owns; the injected
// text would make it create a host marker file.
func TestP10_TerminalInjection(t *testing.T) {
	for _, tty := range []bool{false, true} {
		name := "no-tty"
		if tty {
			name = "tty"
		}
		t.Run(name, func(t *testing.T) {
			eachIdent(t, func(t *testing.T, id *ident) {
				wd := mkdir(t, id, "p10")
				outside := mkdir(t, id, "p10-outside")
				marker := filepath.Join(outside, "p10-marker")
				pol := writePolicy(t, id, policy{})
				tok := token()
				shell := exec.Command("/bin/sh", "-i")
				shell.Dir = outside
				shell.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + id.home, "PS1=$ ", "TERM=dumb", "ENV="}
				if id.uid != os.Geteuid() {
					shell.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id.uid), Gid: uint32(id.gid), Groups: []uint32{}}}
				}
				ptmx, err := pty.Start(shell)
				if err != nil {
					t.Fatalf("pty: %v", err)
				}
				defer func() {
					_ = shell.Process.Kill()
					_ = shell.Wait()
					ptmx.Close()
				}()
				var mu sync.Mutex
				var out bytes.Buffer
				go func() {
					buf := make([]byte, 4096)
					for {
						n, err := ptmx.Read(buf)
						mu.Lock()
						out.Write(buf[:n])
						mu.Unlock()
						if err != nil {
							return
						}
					}
				}()
				waitFor := func(s string, d time.Duration) bool {
					deadline := time.Now().Add(d)
					for time.Now().Before(deadline) {
						mu.Lock()
						ok := strings.Contains(out.String(), s)
						mu.Unlock()
						if ok {
							return true
						}
						time.Sleep(50 * time.Millisecond)
					}
					return false
				}
				flag := ""
				if tty {
					flag = "-t "
				}
				line := fmt.Sprintf("%s run %s--policy %s -C %s -- %s tiocsti 'touch %s'; echo END-$((40+2))-%s\n",
					corralBin, flag, pol, wd, probeBin, marker, tok)
				if _, err := io.WriteString(ptmx, line); err != nil {
					t.Fatal(err)
				}
				if !waitFor("END-42-"+tok, 30*time.Second) {
					mu.Lock()
					t.Fatalf("corral did not finish in the pty; output:\n%s", out.String())
				}
				// Anything injected is queued before this line.
				_, _ = io.WriteString(ptmx, "echo FIN-$((2+2))-"+tok+"\n")
				if !waitFor("FIN-4-"+tok, 10*time.Second) {
					mu.Lock()
					t.Fatalf("the outer shell stopped answering; output:\n%s", out.String())
				}
				time.Sleep(200 * time.Millisecond)
				mu.Lock()
				got := out.String()
				mu.Unlock()
				if !strings.Contains(got, "tiocsti:") {
					t.Fatalf("the probe did not run; output:\n%s", got)
				}
				if exists(marker) {
					t.Errorf("TIOCSTI injected a command into the user's shell (marker %s created); output:\n%s", marker, got)
				}
				if !tty {
					v, _ := lineValue(strings.ReplaceAll(got, "\r", ""), "tiocsti")
					if strings.HasPrefix(v, "ok") {
						t.Errorf("TIOCSTI succeeded without -t: %s", v)
					}
				}
			})
		})
	}
}
