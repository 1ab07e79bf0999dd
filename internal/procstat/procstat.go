// Package procstat reads the fields of /proc/PID/stat that name a process
// across pid reuse (proc(5)).
package procstat

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// Stat is what Read returns of /proc/PID/stat.
type Stat struct {
	State string // field 3: R, S, D, Z (zombie), X (dead), ...
	// StartTicks is field 22, starttime: clock ticks (USER_HZ, 100 on
	// Linux) after boot.
	StartTicks uint64
}

// Read parses /proc/PID/stat. The command name (field 2) may hold spaces
// and ')', so fields are counted from the last ')'.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, errors.New("procstat: malformed /proc/" + strconv.Itoa(pid) + "/stat")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return Stat{}, errors.New("procstat: malformed /proc/" + strconv.Itoa(pid) + "/stat")
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, err
	}
	return Stat{State: f[0], StartTicks: start}, nil
}

// Running reports whether the process exists and is neither a zombie
// (exited, not yet reaped) nor dead.
func (s Stat) Running() bool { return s.State != "" && s.State != "Z" && s.State != "X" }
