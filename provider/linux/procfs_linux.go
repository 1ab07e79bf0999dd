//go:build linux

package linux

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Namespaces compares the namespaces of pid with the caller's
// (/proc/PID/ns links): those that differ, and those it shares. The
// network namespace counts only when ownNet: with network host the
// sandbox shares the host's on purpose. An unreadable link is an error.
func Namespaces(pid int, ownNet bool) (differ, shared []string, err error) {
	for _, ns := range []string{"user", "mnt", "pid", "ipc", "uts", "cgroup", "net"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + ns)
		switch {
		case err != nil:
			return differ, shared, fmt.Errorf("read ns/%s: %w", ns, err)
		case mine != theirs:
			differ = append(differ, ns)
		case ns != "net" || ownNet:
			shared = append(shared, ns)
		}
	}
	return differ, shared, nil
}

// ProcStatus reads /proc/PID/status (proc(5)) as field -> value.
func ProcStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// HeldCapabilities lists the capability sets of a ProcStatus that are
// not empty, as "CapEff=0000003fffffffff".
func HeldCapabilities(status map[string]string) []string {
	var out []string
	for _, c := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb"} {
		if strings.Trim(status[c], "0") != "" {
			out = append(out, c+"="+status[c])
		}
	}
	return out
}
