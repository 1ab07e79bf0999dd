//go:build linux

package probe

import (
	"golang.org/x/sys/unix"
)

func init() { probes["unixpair"] = probeUnixpair }

// probeUnixpair: unixpair [ADDR...] — reaching a named unix socket without
// socket(2), through a socketpair(2) (what network.unix_sockets: deny
// leaves allowed for stream and seqpacket pairs):
//
//	"socketpair TYPE"                   the pair is made (TYPE stream, seqpacket, dgram)
//	"socketpair stream: data"           a byte goes across a stream pair
//	"socketpair dgram sendto ADDR"      a datagram pair's end sends to ADDR
//	"socketpair dgram connect ADDR"     a datagram pair's end is connected to ADDR and writes
//	"socketpair stream connect ADDR"    a stream pair's end is connected to ADDR (EISCONN from the kernel)
//	"socketpair seqpacket connect ADDR" the same for seqpacket
func probeUnixpair(args []string) ([]Result, error) {
	var rs []Result
	types := []struct {
		name string
		typ  int
	}{{"stream", unix.SOCK_STREAM}, {"seqpacket", unix.SOCK_SEQPACKET}, {"dgram", unix.SOCK_DGRAM}}
	for _, t := range types {
		fds, err := unix.Socketpair(unix.AF_UNIX, t.typ|unix.SOCK_CLOEXEC, 0)
		rs = append(rs, result("socketpair "+t.name, err))
		if err != nil {
			continue
		}
		if t.typ == unix.SOCK_STREAM {
			_, err := unix.Write(fds[0], []byte("x"))
			b := make([]byte, 1)
			if err == nil {
				_, err = unix.Read(fds[1], b)
			}
			rs = append(rs, result("socketpair stream: data", err))
		}
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	for _, addr := range args {
		sa := &unix.SockaddrUnix{Name: addr}
		for _, t := range types {
			if t.typ == unix.SOCK_DGRAM {
				rs = append(rs, pairTry("socketpair dgram sendto "+addr, t.typ, func(fd int) error {
					return unix.Sendto(fd, []byte("probe"), 0, sa)
				}))
			}
			rs = append(rs, pairTry("socketpair "+t.name+" connect "+addr, t.typ, func(fd int) error {
				if err := unix.Connect(fd, sa); err != nil {
					return err
				}
				_, err := unix.Write(fd, []byte("probe"))
				return err
			}))
		}
	}
	return rs, nil
}

// pairTry makes a pair of typ and runs f on one end.
func pairTry(what string, typ int, f func(fd int) error) Result {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		r := result(what, err)
		r.Detail = "the socketpair was refused"
		return r
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	return result(what, f(fds[0]))
}
