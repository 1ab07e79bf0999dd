//go:build linux

package e2e

import "testing"

// The alternate syscall paths qualify's P14 does not try (the probe
// package has no add_key, fsopen, open_tree or packet socketpair, and
// tries bpf, userfaultfd and setns in other forms) are refused too; P14
// itself runs in TestQualify.
func TestSyscallsBeyondP14(t *testing.T) {
	allowed := map[string]bool{"EPERM": true, "ENOSYS": true, "EAFNOSUPPORT": true}
	calls := []string{"socketpair_packet", "add_key", "bpf_map_create", "fsopen", "open_tree", "userfaultfd_user_mode", "setns_fd0_newns"}
	eachIdent(t, func(t *testing.T, id *ident) {
		wd := mkdir(t, id, "syscalls")
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
	})
}
