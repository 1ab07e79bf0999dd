//go:build linux

package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Live folder grants (provider.LiveGrants) on a Linux host: a policy with
// consent.folders gets, at Provision, a slot — a small tmpfs mounted in
// the host's mount namespace at <state>/grants/slot (its parent 0700),
// made shared, with ro/ and rw/ (internal/grants) — which the container
// gets with an rslave bind at provider.GrantSlots (read-only at its top,
// not below), with Landlock read-only on provider.GrantSlotRO and
// read-write on GrantSlotRW in every exec's ruleset. A grant is mounted
// in the slot on the host and reaches the running container by
// propagation; it is effective only once /proc/<init>/mountinfo (the
// container's init by the daemon's State.Pid now) shows it. A `docker
// restart` binds the slot again, grants and all. Revoke detaches it on
// the host; the container's processes still holding it are found by
// their fds and cwd (internal/grants.Holders). Deprovision, Destroy and
// Sweep (`corral gc`) detach the slot before the state dir is removed
// (removeState), so a SIGKILLed corral leaves no host mount once swept.
//
// The container has no user namespace of its own: the kernel does not
// lock a propagated mount there (MNT_LOCK_READONLY comes only with a less
// privileged user namespace), so GrantStatus.Locked is false and a
// read-only grant stays read-only by its mount flag, Landlock's rule on
// GrantSlotRO, the capabilities the container lacks (all dropped, the
// bounding set too, no-new-privileges), moby's seccomp profile and
// corral's (mount, umount2, mount_setattr, open_tree, move_mount refused)
// and Landlock's ban on mount changes. Only a process with CAP_SYS_ADMIN
// in the host's user namespace — host root, who can write the folder
// anyway — can remount it.
//
// The daemon must see the slot: it must share this process's mount
// namespace (compared by /proc/<dockerd>/ns/mnt), not be Docker Desktop
// (a VM), and corral must be root to mount the slot. Otherwise Map warns
// that folder grants require recreating the sandbox (ConsentRequiresRecreate)
// and GrantFolder says so (CodeUnavailable).

// grantsRecreate is the warning, and GrantFolder's error, where the daemon
// cannot receive a live grant.
const grantsRecreate = "folder grants require recreating the sandbox on this daemon"

// slotDirs are the slot's parent in a state dir and the slot in it.
const (
	slotParent = "grants"
	slotName   = "slot"
)

// grantsFile is where a persistent sandbox keeps its grants (Recover).
const grantsFile = "grants.json"

// slotPath is the host path of the slot of state dir state.
func slotPath(state string) string { return filepath.Join(state, slotParent, slotName) }

// propagation says whether a slot mounted by this process reaches the
// daemon's containers, and why not.
func (h *hostFacts) propagation() (bool, string) {
	if os.Getuid() != 0 {
		return false, fmt.Sprintf("corral runs as uid %d, and only root can mount the host-side slot the daemon binds into the container", os.Getuid())
	}
	if strings.Contains(h.osName, "Docker Desktop") {
		return false, "the daemon is Docker Desktop's, in a VM that shares no mount namespace with this host"
	}
	pid := daemonPID()
	if pid <= 0 {
		return false, "the daemon's process is not visible here, so whether it shares this mount namespace is not known"
	}
	theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	ours, err2 := os.Readlink("/proc/self/ns/mnt")
	if err1 != nil || err2 != nil {
		return false, fmt.Sprintf("the daemon's mount namespace cannot be read: %v", firstNonNil(err1, err2))
	}
	if theirs != ours {
		return false, fmt.Sprintf("the daemon (pid %d) runs in another mount namespace (%s, this process %s): a slot mounted here may never reach it", pid, theirs, ours)
	}
	return true, ""
}

// daemonPID is the pid of the daemon behind the local socket: the peer of
// a connection to it (SO_PEERCRED), or, when that is pid 1 (a socket
// systemd made and passed on), the one process named dockerd; 0 unknown.
func daemonPID() int {
	sock := daemonSocket()
	if sock == "" {
		return 0
	}
	pid := 0
	if c, err := net.Dial("unix", sock); err == nil {
		pid = peerPID(c.(*net.UnixConn))
		c.Close()
	}
	if pid > 1 {
		return pid
	}
	found := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == "dockerd" {
			if found != 0 {
				return 0 // more than one: not known which
			}
			found = n
		}
	}
	return found
}

// mapConsent adds what r's consent section needs (Map): the slot
// (Spec.Slots, its Landlock rules) where the daemon propagates mounts,
// else the recreate warning; and the consent channel (ShimSpec.ConsentPort,
// its Landlock connect port, provider.ConsentURLEnv) when the container
// has its own network namespace.
func mapConsent(r *policy.Resolved, sp *Spec, h *hostFacts, add func(provider.Severity, string, string, string, ...any)) {
	c := r.Consent
	if c == nil {
		return
	}
	if len(c.Folders) > 0 {
		ok, why := h.propagation()
		var clash []string
		for _, b := range sp.Binds {
			if policy.Within(b.Target, provider.GrantSlots) {
				clash = append(clash, b.Target+" ("+b.Field+")")
			}
		}
		for _, t := range sp.Tmpfs {
			if policy.Within(t.Path, provider.GrantSlots) || policy.Within(provider.GrantSlots, t.Path) {
				clash = append(clash, t.Path+" (tmpfs)")
			}
		}
		switch {
		case len(clash) > 0:
			add(provider.SeverityError, "filesystem", "consent.folders", "%s is where the folders the workload may ask for appear, but the policy mounts there: %s", provider.GrantSlots, strings.Join(clash, ", "))
		case !ok:
			sp.FolderMode = provider.ConsentRequiresRecreate
			sp.GrantsUnavailable = grantsRecreate + ": " + why
			add(provider.SeverityWarning, "filesystem", "consent.folders", "%s", sp.GrantsUnavailable)
		default:
			sp.Slots, sp.FolderMode = true, provider.ConsentLive
			ll := &sp.Shim.Landlock
			ll.RODirs = append(ll.RODirs, provider.GrantSlotRO)
			ll.RWDirs = append(ll.RWDirs, provider.GrantSlotRW)
			add(provider.SeverityInfo, "filesystem", "consent.folders", "a folder granted while the sandbox runs appears at %s/<label> (read-only) or %s/<label>, mounted on the host in a slot the container binds with rslave propagation; it survives docker restart. The container has no user namespace, so the kernel does not lock a grant: read-only rests on the mount flag, Landlock, the dropped capabilities and seccomp", provider.GrantSlotRO, provider.GrantSlotRW)
		}
	}
	if sp.Network == "host" {
		add(provider.SeverityWarning, "network", "consent", "network host: the consent channel needs the container's own network namespace (a listener at 127.0.0.1:%d would be every host process's), so none is served and the workload cannot ask; grants decided outside still apply (use network none or proxy)", provider.ConsentPort)
		return
	}
	sp.Shim.ConsentPort = provider.ConsentPort
	sp.Shim.Landlock.ConnectPorts = append(sp.Shim.Landlock.ConnectPorts, provider.ConsentPort)
	env := []string{provider.ConsentURLEnv + "=" + consentURL()}
	sp.Env = provider.WithEnv(sp.Env, env)
	sp.Shim.Env = provider.WithEnv(sp.Shim.Env, env)
	add(provider.SeverityInfo, "network", "consent", "the workload asks at %s (%s): corral's init forwards it to corral outside through a unix socket", consentURL(), provider.ConsentURLEnv)
}

// consentURL is what provider.ConsentURLEnv says inside.
func consentURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(provider.ConsentPort))
}

// mountSlot makes <state>/grants (0700) and mounts the slot in it
// (Provision, as root).
func (s *Sandbox) mountSlot() error {
	if err := os.Mkdir(filepath.Join(s.state, slotParent), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(slotPath(s.state), 0o755); err != nil {
		return err
	}
	slot, err := grants.MountSlot(slotPath(s.state))
	if err != nil {
		return err
	}
	s.slot = slot
	return nil
}

// liveGrants is what a sandbox granted so far, in order.
type liveGrants struct {
	mu   sync.Mutex
	list []*provider.GrantStatus
	// readIn is, per label, the start time (procstat) of the container's
	// init whose mountinfo gave the grant's MountIDs. After a docker
	// restart those ids name nothing of the grant (every process that held
	// it was killed), and the kernel may have given them to other mounts.
	// Not kept across Recover.
	readIn map[string]uint64
}

func (l *liveGrants) find(label string) *provider.GrantStatus {
	for _, g := range l.list {
		if g.Label == label {
			return g
		}
	}
	return nil
}

// noSlots is GrantFolder's error for a sandbox planned without a slot.
func (s *Sandbox) noSlots() error {
	if s.spec.GrantsUnavailable != "" {
		return &provider.Error{Code: provider.CodeUnavailable, Layer: "mounts", Msg: "docker: " + s.spec.GrantsUnavailable}
	}
	return &provider.Error{Code: provider.CodePolicyRejected, Layer: "mounts", Msg: fmt.Sprintf("docker: sandbox %s has no grant slots: the policy had no consent.folders when it was created", s.id)}
}

// grantPath is where grant label is inside.
func grantPath(label string, ro bool) string {
	if ro {
		return path.Join(provider.GrantSlotRO, label)
	}
	return path.Join(provider.GrantSlotRW, label)
}

// currentInit is the host pid of the container's init now: the daemon's
// State.Pid, which changes with a docker restart. It is asked again only
// when the pid it gave last has ended (its start time, procstat, differs).
func (s *Sandbox) currentInit(ctx context.Context) (int, error) {
	s.initMu.Lock()
	pid, start := s.liveInit, s.liveStart
	s.initMu.Unlock()
	if pid > 0 && start != 0 && startTime(pid) == start {
		return pid, nil
	}
	insp, err := s.cli.ContainerInspect(ctx, s.cid, client.ContainerInspectOptions{})
	if err != nil {
		return 0, fmt.Errorf("inspect the container: %w", err)
	}
	if st := insp.Container.State; st == nil || !st.Running || st.Pid == 0 {
		return 0, errors.New("the container is not running")
	}
	pid = insp.Container.State.Pid
	s.initMu.Lock()
	s.liveInit, s.liveStart = pid, startTime(pid)
	s.initMu.Unlock()
	return pid, nil
}

// GrantFolder mounts g in the host slot and returns its status once the
// container's mountinfo shows it (provider.LiveGrants). Errors:
// CodeUnavailable where the daemon cannot propagate (grantsRecreate);
// CodePolicyRejected (layer mounts) without a slot, for a bad or used
// label, a source that changed, a mask that cannot be placed;
// CodeInternal when a mount failed or the container does not show the
// grant (nothing of it is left).
func (s *Sandbox) GrantFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	if s.slot == nil {
		return provider.GrantStatus{}, s.noSlots()
	}
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	if s.grants.find(g.Label) != nil {
		return provider.GrantStatus{}, &provider.Error{Code: provider.CodePolicyRejected, Layer: "mounts", Msg: fmt.Sprintf("docker: grant label %q was used in this sandbox already (labels are never reused)", g.Label)}
	}
	absent, err := s.slot.Grant(grants.Request{Label: g.Label, Source: g.Source, Dev: g.Dev, Ino: g.Ino, ReadOnly: g.ReadOnly, Masks: g.Masks, ReadOnlyWithin: g.ReadOnlyWithin})
	if err != nil {
		var ref *grants.RefusedError
		if errors.As(err, &ref) {
			return provider.GrantStatus{}, &provider.Error{Code: provider.CodePolicyRejected, Layer: "mounts", Msg: "docker: " + ref.Msg}
		}
		return provider.GrantStatus{}, provider.LayerError(provider.CodeInternal, "mounts", err)
	}
	st := provider.GrantStatus{Label: g.Label, Source: g.Source, Path: grantPath(g.Label, g.ReadOnly), ReadOnly: g.ReadOnly}
	if len(absent) > 0 {
		st.Detail = "absent when granted, so not masked or protected: " + strings.Join(absent, ", ")
	}
	if err := s.readBack(ctx, &st); err != nil {
		_ = s.slot.Revoke(g.Label, g.ReadOnly) // not in force: nothing is left
		return provider.GrantStatus{}, provider.LayerError(provider.CodeInternal, "mounts", err)
	}
	rec := st
	s.grants.list = append(s.grants.list, &rec)
	s.saveGrants()
	return st, nil
}

// readBack fills st from the container's mountinfo now: effective with
// its mount ids (the grant's top first) and Locked, or an error saying
// what the container shows instead (State missing).
func (s *Sandbox) readBack(ctx context.Context, st *provider.GrantStatus) error {
	pid, err := s.currentInit(ctx)
	if err != nil {
		st.State = provider.GrantMissing
		return err
	}
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		st.State = provider.GrantMissing
		return fmt.Errorf("read the container's mountinfo: %w", err)
	}
	top, ok := grants.Top(es, st.Path)
	switch {
	case !ok:
		st.State = provider.GrantMissing
		return fmt.Errorf("the container shows no mount at %s", st.Path)
	case st.ReadOnly && !top.ReadOnly():
		st.State = provider.GrantMissing
		return fmt.Errorf("the container's mount at %s is not read-only (%s)", st.Path, top.Options)
	case top.Master() == 0:
		st.State = provider.GrantMissing
		return fmt.Errorf("the container's mount at %s did not come by propagation (no master:)", st.Path)
	}
	st.State, st.MountIDs = provider.GrantEffective, mountinfo.Subtree(es, top.ID)
	st.Locked = lockedIn(pid)
	if t := startTime(pid); t != 0 {
		if s.grants.readIn == nil {
			s.grants.readIn = map[string]uint64{}
		}
		s.grants.readIn[st.Label] = t
	}
	return nil
}

// lockedIn reports whether mounts propagated into pid's mount namespace
// are locked by the kernel: only when its user namespace is not this
// process's (mount_namespaces(7), "Restrictions on mount namespaces").
func lockedIn(pid int) bool {
	theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	ours, err2 := os.Readlink("/proc/self/ns/user")
	return err1 == nil && err2 == nil && theirs != ours
}

// RevokeFolder detaches grant label on the host, checks the container
// shows none of its mounts, and reports its holders; with kill they are
// sent SIGKILL (provider.LiveGrants). A revoked grant is only looked at
// again. CodeNotFound for an unknown label.
func (s *Sandbox) RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error) {
	if s.slot == nil {
		return provider.GrantStatus{}, s.noSlots()
	}
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	g := s.grants.find(label)
	if g == nil {
		return provider.GrantStatus{}, provider.Errorf(provider.CodeNotFound, "docker: sandbox %s has no grant %q", s.id, label)
	}
	if g.State == provider.GrantEffective || g.State == provider.GrantMissing {
		// The ids of its mounts now: new ones after a docker restart.
		if st := *g; s.readBack(ctx, &st) == nil {
			g.MountIDs = st.MountIDs
		}
		if err := s.slot.Revoke(label, g.ReadOnly); err != nil {
			return *g, provider.LayerError(provider.CodeInternal, "mounts", err)
		}
		if err := s.gone(ctx, g); err != nil {
			return *g, provider.LayerError(provider.CodeInternal, "mounts", err)
		}
		g.State = provider.GrantRevoked
	}
	s.holders(ctx, g, kill)
	s.saveGrants()
	return *g, nil
}

// gone checks that the container shows no mount at g's path and none of
// g's mounts (a stopped container shows none).
func (s *Sandbox) gone(ctx context.Context, g *provider.GrantStatus) error {
	pid, err := s.currentInit(ctx)
	if err != nil {
		return nil
	}
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return fmt.Errorf("read the container's mountinfo: %w", err)
	}
	for _, e := range es {
		if e.Point == g.Path || slices.Contains(g.MountIDs, e.ID) {
			return fmt.Errorf("revoked, but the container still shows mount %d at %s", e.ID, e.Point)
		}
	}
	return nil
}

// holders sets g's Holders (the container's processes holding one of its
// mounts) and State; with kill they are killed first.
func (s *Sandbox) holders(ctx context.Context, g *provider.GrantStatus, kill bool) {
	pid, err := s.currentInit(ctx)
	var hs []grants.Holder
	if at, ok := s.grants.readIn[g.Label]; err == nil && ok && startTime(pid) != 0 && at != startTime(pid) {
		// A revoked grant's mounts were gone from the slot before the
		// restart, so the new container never had them.
		g.Detail = "the container restarted since the grant was revoked: none of its processes can hold it"
	} else if err == nil {
		hs = grants.Holders(pid, g.MountIDs)
		if kill && len(hs) > 0 {
			hs = grants.Kill(pid, g.MountIDs, hs)
		}
	}
	g.Holders, g.State = nil, provider.GrantRevoked
	for _, h := range hs {
		g.Holders = append(g.Holders, provider.Holder(h))
		if !h.Killed {
			g.State = provider.GrantHeld
		}
	}
}

// FolderGrants are the grants made so far, revoked ones too, read back
// now (provider.LiveGrants): an effective one the container no longer
// shows is missing; a revoked one's holders are looked for again.
func (s *Sandbox) FolderGrants(ctx context.Context) ([]provider.GrantStatus, error) {
	if s.slot == nil {
		return nil, nil
	}
	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	out := make([]provider.GrantStatus, 0, len(s.grants.list))
	for _, g := range s.grants.list {
		switch g.State {
		case provider.GrantEffective, provider.GrantMissing:
			st := *g
			detail := st.Detail
			if err := s.readBack(ctx, &st); err != nil {
				detail = err.Error()
			}
			g.State, g.Detail, g.Locked = st.State, detail, st.Locked
			if st.State == provider.GrantEffective {
				g.MountIDs = st.MountIDs // new ids after a docker restart
			}
		default:
			s.holders(ctx, g, false)
		}
		out = append(out, *g)
	}
	return out, nil
}

// FolderConsentMode is how this sandbox takes folder grants: live,
// requires-recreate (the daemon cannot propagate), or "" (no
// consent.folders).
func (s *Sandbox) FolderConsentMode() provider.ConsentMode { return s.spec.FolderMode }

// verifySlots checks, after Start, that the container shows the slot at
// provider.GrantSlots: read-only at its top and a slave (master:N) of the
// host's, so that grants reach it; the mounts layer's detail says so.
func (s *Sandbox) verifySlots() error {
	if s.slot == nil {
		return nil
	}
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", s.initPID))
	if err != nil {
		return provider.LayerError(provider.CodeStartFailed, "mounts", err)
	}
	top, ok := grants.Top(es, provider.GrantSlots)
	switch {
	case !ok:
		err = fmt.Errorf("the container shows no mount at %s", provider.GrantSlots)
	case top.Master() == 0:
		err = fmt.Errorf("%s is not a slave of the host's slot (%s): grants would not reach it", provider.GrantSlots, strings.Join(top.Optional, " "))
	case !top.ReadOnly():
		err = fmt.Errorf("%s is not read-only (%s)", provider.GrantSlots, top.Options)
	}
	if err != nil {
		return &provider.Error{Code: provider.CodeStartFailed, Layer: "mounts", Msg: "verification failed", Err: err}
	}
	for i := range s.layers {
		if s.layers[i].Layer == policy.LayerMounts {
			s.layers[i].Detail += fmt.Sprintf("; grant slots at %s (a slave of the host's slot, master:%d)", provider.GrantSlots, top.Master())
		}
	}
	return nil
}

// saveGrants writes a persistent sandbox's grants to its state dir, for
// Recover (best effort: a later FolderGrants reads back all the same).
func (s *Sandbox) saveGrants() {
	if !s.spec.Persistent || s.state == "" {
		return
	}
	b, err := json.Marshal(s.grants.list)
	if err == nil {
		tmp := filepath.Join(s.state, grantsFile+".tmp")
		if os.WriteFile(tmp, b, 0o600) == nil {
			_ = os.Rename(tmp, filepath.Join(s.state, grantsFile))
		}
	}
}

// recoverSlot reattaches a persistent sandbox's slot and its grants
// (Recover): the slot must still be mounted (a gateway restart leaves it);
// a missing one is an error, the sandbox must be recreated.
func (s *Sandbox) recoverSlot() error {
	if !s.spec.Slots {
		return nil
	}
	slot, err := grants.OpenSlot(slotPath(s.state))
	if err != nil {
		return provider.LayerError(provider.CodeStartFailed, "mounts", fmt.Errorf("docker sandbox %s: its grant slot: %w: recreate the sandbox", s.id, err))
	}
	s.slot = slot
	if b, err := os.ReadFile(filepath.Join(s.state, grantsFile)); err == nil {
		_ = json.Unmarshal(b, &s.grants.list)
	}
	return nil
}
