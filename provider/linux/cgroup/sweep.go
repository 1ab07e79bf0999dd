//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/procstat"
)

// runPID parses the group names Sweep may remove, "run-<supervisor pid>-...".
func runPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "run-")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(num)
	return pid, ok && err == nil && pid > 0 && num[0] != '+'
}

// Sweep removes groups left behind by a supervisor that died without
// cleaning up (e.g. SIGKILLed): children of the corral parent directories
// named "run-<pid>-..." whose <pid> no longer exists, or now belongs to a
// process that started after the group was created (pid reuse). Processes
// still in such a group are killed first. It returns the directories
// removed. Callers run it at start-up.
func Sweep() (removed []string, err error) {
	c := probe()
	if c.h == nil {
		return nil, nil
	}
	return sweepParents(corralParents(c))
}

// corralParents lists every corral directory New could use, one per v1
// hierarchy and the v2 one, grouped as the hierarchy version they belong to.
func corralParents(c choice) (v2 []string, v1 []string) {
	if c.h.v2 != nil && c.v2.parent != "" {
		v2 = append(v2, filepath.Join(c.v2.parent, parentName))
	}
	for _, h := range c.h.v1 {
		v1 = append(v1, filepath.Join(h.own, parentName))
	}
	return v2, v1
}

func sweepParents(v2, v1 []string) ([]string, error) {
	var removed []string
	var errs []error
	sweepOne := func(version int, parents []string) {
		// name -> its directories across hierarchies
		byName := map[string][]string{}
		for _, p := range parents {
			ents, err := os.ReadDir(p)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if _, ok := runPID(e.Name()); e.IsDir() && ok {
					byName[e.Name()] = append(byName[e.Name()], filepath.Join(p, e.Name()))
				}
			}
		}
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			dirs := byName[name]
			pid, _ := runPID(name)
			if supervisorAlive(pid, dirs[0]) {
				continue
			}
			if err := groupOf(name, version, dirs).Remove(); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dirs...)
		}
	}
	sweepOne(2, v2)
	sweepOne(1, v1)
	return removed, errors.Join(errs...)
}

// groupOf is the existing group name of one hierarchy version, at dirs.
func groupOf(name string, version int, dirs []string) *Group {
	g := &Group{name: name, version: version, dirs: map[string]string{}, order: dirs, fd: -1}
	if version == 2 {
		g.dirs[""] = dirs[0]
	} else {
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, "freezer.state")); err == nil {
				g.dirs["freezer"] = d
			}
		}
	}
	return g
}

// RemoveNamed removes group name (one New made, whose creator is gone)
// wherever a corral parent holds it, killing what still runs in it
// first; no such group is not an error.
func RemoveNamed(name string) error {
	if !validName(name) {
		return fmt.Errorf("cgroup: invalid group name %q", name)
	}
	c := probe()
	if c.h == nil {
		return nil
	}
	v2, v1 := corralParents(c)
	var errs []error
	for version, parents := range map[int][]string{2: v2, 1: v1} {
		var dirs []string
		for _, p := range parents {
			if st, err := os.Stat(filepath.Join(p, name)); err == nil && st.IsDir() {
				dirs = append(dirs, filepath.Join(p, name))
			}
		}
		if len(dirs) > 0 {
			errs = append(errs, groupOf(name, version, dirs).Remove())
		}
	}
	return errors.Join(errs...)
}

// supervisorAlive reports whether pid exists and could be the process that
// created dir. A process that started well after dir was created is a reuse
// of the pid. The directory's timestamps on cgroupfs (kernfs) are never
// earlier than its creation, so the comparison can only err towards keeping
// a group.
func supervisorAlive(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return false
	}
	start, ok := procStart(pid)
	if !ok {
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		return err == nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return true
	}
	created := time.Unix(st.Mtim.Unix())
	if c := time.Unix(st.Ctim.Unix()); c.Before(created) {
		created = c
	}
	return !start.After(created.Add(5 * time.Second))
}

// procStart returns when pid started: /proc/<pid>/stat field 22 (starttime,
// in USER_HZ=100 ticks since boot, proc(5)) plus btime from /proc/stat.
func procStart(pid int) (time.Time, bool) {
	st, err := procstat.Read(pid)
	if err != nil {
		return time.Time{}, false
	}
	bt, ok := bootTime()
	if !ok {
		return time.Time{}, false
	}
	return bt.Add(time.Duration(st.StartTicks) * (time.Second / 100)), true
}

func bootTime() (time.Time, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(n, 0), true
		}
	}
	return time.Time{}, false
}
