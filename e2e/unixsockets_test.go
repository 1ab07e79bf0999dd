//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLateUnixSocket (issue 13, "late unix sockets"): a host process makes
// a listening unix socket in the read-write workdir after the sandbox
// started, so the start-up scan that hides sockets in granted directories
// cannot see it, and the workload connects to it. With
// network.unix_sockets: allow that connection succeeds (the hole: Landlock
// as corral applies it does not restrict connect() on socket files); with
// deny, and with the default, socket(AF_UNIX) is refused and the host
// listener sees nothing.
func TestLateUnixSocket(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		for _, c := range []struct {
			setting string // "": the default
			reached bool
		}{{"allow", true}, {"deny", false}, {"", false}} {
			name := c.setting
			if name == "" {
				name = "default"
			}
			t.Run(name, func(t *testing.T) {
				work := mkdir(t, id, "late-unix")
				p := policy{}
				if c.setting != "" {
					p.Network, p.NetRules = "none", "  unix_sockets: "+c.setting+"\n"
				}
				pol := writePolicy(t, id, p)
				sock := filepath.Join(work, "late.sock")
				script := fmt.Sprintf(`: > started
i=0; while [ ! -e go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
%s connect unix late.sock`, probeBin)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := run{id: id, policy: pol, workdir: work, args: sh(script)}.command(ctx)
				var out, errb strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &errb
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				waitFor := func() bool {
					for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
						if exists(filepath.Join(work, "started")) {
							return true
						}
						select {
						case err := <-done:
							done <- err
							return false
						default:
						}
					}
					return false
				}
				if !waitFor() {
					cancel()
					<-done
					t.Fatalf("the sandbox never started\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
				}
				// Only now, with the run under way, the socket appears.
				accepted := listenCounter(t, "unix", sock)
				if accepted == nil {
					t.Fatal("cannot listen in the workdir")
				}
				if err := os.Chmod(sock, 0o777); err != nil {
					t.Fatal(err)
				}
				writeFile(t, id, filepath.Join(work, "go"), "", 0o644)
				if err := <-done; err != nil {
					t.Fatalf("corral: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
				}
				time.Sleep(200 * time.Millisecond)
				got, _ := lineValue(out.String(), "connect unix late.sock")
				n := accepted.n.Load()
				t.Logf("unix_sockets %s: connect %s, host listener accepted %d", name, got, n)
				if c.reached {
					// The control: without the refusal the attack works.
					if got != "ok" || n == 0 {
						t.Errorf("with unix_sockets: allow the late socket was not reached (connect %q, %d accepted): the test does not show the hole\n%s", got, n, errb.String())
					}
					return
				}
				if got != "EPERM" {
					t.Errorf("connect to the late socket: %q, want EPERM\nstdout:\n%s\nstderr:\n%s", got, out.String(), errb.String())
				}
				if n != 0 {
					t.Errorf("the host's late unix socket accepted %d connections from the sandbox", n)
				}
			})
		}
	})
}
