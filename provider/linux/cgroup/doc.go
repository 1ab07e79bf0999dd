//go:build linux

// Package cgroup puts one sandbox's process tree into a fresh cgroup with
// memory, pids and CPU limits, verifies the limits from the filesystem,
// kills everything in the group, and removes it.
//
// It drives cgroup v2 (Documentation/admin-guide/cgroup-v2.rst) when the
// unified hierarchy (at /sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid
// hosts) offers at least as many of the memory, pids and cpu controllers as
// v1 does; else cgroup v1 (Documentation/admin-guide/cgroup-v1/memory.rst,
// cgroup-v1/pids.rst, cgroup-v1/freezer-subsystem.rst; CPU bandwidth per
// Documentation/scheduler/sched-bwc.rst). Mounts are found through
// /proc/self/mountinfo and our own cgroup through /proc/self/cgroup.
//
// # Placement on v1
//
// <hierarchy mount>/<own cgroup path>/corral/<name> in each of the memory,
// pids, cpu (with whatever is co-mounted, e.g. cpuacct) and freezer
// hierarchies that are writable; v1 has no internal-process rule.
//
// # Placement on v2
//
// A non-root cgroup with controllers enabled in cgroup.subtree_control can't
// contain processes (cgroup-v2.rst, "No Internal Process Constraint"), and
// our own cgroup contains us. So groups never go directly below our own
// cgroup with it still holding us. Strategies, tried in order:
//
//  1. root: our cgroup is the hierarchy's real root, which is exempt:
//     <root>/corral/<name>.
//  2. sibling: the parent P of our cgroup is writable by us (the directory
//     and cgroup.subtree_control) and holds no processes: enable the
//     controllers in P, create P/corral beside our cgroup, enable them in
//     P/corral, create P/corral/<name>. Nobody moves. The usual case for root
//     (P is e.g. user-1000.slice) and for desktop users inside systemd's
//     user@.service, whose whole subtree belongs to the user.
//  3. nested: our own cgroup O is delegated to us (systemd-run --user --scope
//     -p Delegate=yes corral run ...) and we are its only process: move
//     ourselves into the leaf O/corral-supervisor, then proceed as in 2 with
//     P = O. Later supervisors started in that leaf take strategy 2.
//
// Otherwise Probe reports Writable=false with a Reason and a Fix. Controllers
// New enables in parents stay enabled, and the corral directory itself is
// kept (concurrent supervisors share it); Remove deletes only the group's
// own directories, and Sweep those of dead supervisors.
package cgroup
