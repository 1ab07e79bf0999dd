//go:build linux

// Package landlock applies Corral's Landlock ruleset (filesystem grants,
// TCP connect to one port, scoping) to the calling process with
// go-landlock, at the best ABI the kernel offers. Both the linux provider's
// init and the docker provider's in-container shim use it. See the kernel's
// Documentation/userspace-api/landlock.rst.
package landlock

import (
	"errors"
	"fmt"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// ABI returns the kernel's Landlock ABI version (0 if none), from
// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
func ABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1)
	if e != 0 {
		return 0
	}
	return int(v)
}

// Apply restricts every thread of the process (and so what it executes)
// to s, using the best the kernel's ABI offers: filesystem (ABI 1+), TCP
// bind/connect (ABI 4+, when s.DenyTCP), abstract-socket and signal
// scoping (ABI 6+). It returns a one-line description of what is in force.
func Apply(s Spec) (string, error) {
	abi := ABI()
	if abi < 1 {
		return "", errors.New("not supported by this kernel (landlock ABI 0; needs CONFIG_SECURITY_LANDLOCK and lsm=landlock)")
	}
	cfg := ll.V6
	if !s.DenyTCP {
		cfg.HandledAccessNet = 0
	}
	if s.BindAny {
		cfg.HandledAccessNet &^= ll.AccessNetSet(unix.LANDLOCK_ACCESS_NET_BIND_TCP)
	}
	cfg = cfg.BestEffort()
	rules := []ll.Rule{
		ll.RODirs(s.RODirs...),
		ll.ROFiles(s.ROFiles...),
		ll.RWDirs(s.RWDirs...).WithRefer().WithIoctlDev(),
		ll.RWFiles(s.RWFiles...).WithIoctlDev(),
	}
	connects := s.Connects()
	if s.DenyTCP {
		for _, p := range connects {
			rules = append(rules, ll.ConnectTCP(uint16(p)))
		}
	}
	if s.DenyTCP {
		for _, p := range s.ServePorts {
			rules = append(rules, ll.BindTCP(uint16(p)), ll.ConnectTCP(uint16(p)))
		}
	}
	if err := cfg.Restrict(rules...); err != nil {
		return "", err
	}
	parts := []string{"filesystem"}
	if s.DenyTCP && abi >= 4 {
		d := tcpDescription(connects, s.ServePorts)
		if s.BindAny {
			d += ", bind any"
		}
		parts = append(parts, d)
	}
	if abi >= 6 {
		parts = append(parts, "scope(abstract-unix,signal)")
	}
	return fmt.Sprintf("abi %d: %s", abi, strings.Join(parts, ", ")), nil
}

// tcpDescription says what TCP a ruleset that handles it allows:
// "tcp", "tcp (connect only to port 3128)", "tcp (connect only to ports
// [3128 3129])", or with serve ports "tcp (bind only to ports [8080],
// connect only to ports [3128 8080])".
func tcpDescription(connects, serve []int) string {
	switch conn := append(append([]int(nil), connects...), serve...); {
	case len(serve) > 0:
		return fmt.Sprintf("tcp (bind only to ports %v, connect only to ports %v)", serve, conn)
	case len(conn) == 1:
		return fmt.Sprintf("tcp (connect only to port %d)", conn[0])
	case len(conn) > 1:
		return fmt.Sprintf("tcp (connect only to ports %v)", conn)
	}
	return "tcp"
}
