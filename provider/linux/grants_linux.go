//go:build linux

package linux

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/provider"
)

// Live folder grants (provider.LiveGrants) of a sandbox with grant slots
// (MountGrants): the slot holder mounts each (slots_linux.go), and every
// status is read back from the kernel: a grant is effective only once
// /proc/<init>/mountinfo shows a mount at <slot>/<label> (read-only for
// a read-only grant), whose id and its submounts' are recorded; Locked
// when it came by propagation (its entry has master:N). A revoke is
// done once that mount and every one of those ids are gone; then the
// sandbox's processes (init's pid namespace) still holding the detached
// tree are found by their fds (fdinfo mnt_id), cwd and root (statx
// STATX_MNT_ID), and, when asked, sent SIGKILL. The kernel has no revoke
// of open fds: a holder keeps what it opened (README of the consent
// experiment, T6).

// noSlots is the error of a grant to a sandbox planned without slots.
func noSlots(id string) error {
	return &provider.Error{Code: provider.CodePolicyRejected, Layer: "mounts",
		Msg: fmt.Sprintf("linux: sandbox %s has no grant slots: the policy had no consent.folders when the sandbox started", id)}
}

// liveGrants is the folder grants made in one sandbox, in order.
type liveGrants struct {
	mu   sync.Mutex
	list []*provider.GrantStatus
}

func (l *liveGrants) find(label string) *provider.GrantStatus {
	for _, g := range l.list {
		if g.Label == label {
			return g
		}
	}
	return nil
}

// grantPath is where grant label is inside: <slot>/<label>.
func grantPath(label string, ro bool) string {
	if ro {
		return path.Join(provider.GrantSlotRO, label)
	}
	return path.Join(provider.GrantSlotRW, label)
}

// GrantFolder mounts g in the running sandbox and returns its status once
// the sandbox's mountinfo shows it (provider.LiveGrants). Errors:
// CodePolicyRejected (layer mounts) for a sandbox without slots, a bad or
// used label, a source that changed since it was asked for, a mask that
// cannot be placed; CodeInternal when a mount failed or the sandbox does
// not show the grant (nothing of it is left).
func (s *Sandbox) GrantFolder(ctx context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	if s.slots == nil {
		return provider.GrantStatus{}, noSlots(s.id)
	}
	if !grants.ValidLabel(g.Label) {
		return provider.GrantStatus{}, &provider.Error{Code: provider.CodePolicyRejected, Layer: "mounts", Msg: fmt.Sprintf("grant label %q: want [A-Za-z0-9._-], 1 to 64 bytes, not . or ..", g.Label)}
	}
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if s.live.find(g.Label) != nil {
		return provider.GrantStatus{}, &provider.Error{Code: provider.CodePolicyRejected, Layer: "mounts", Msg: fmt.Sprintf("grant label %q was used in this sandbox already (labels are never reused)", g.Label)}
	}
	r, err := s.slots.call(slotReq{Op: "grant", Grant: &g})
	if err != nil {
		return provider.GrantStatus{}, provider.LayerError(provider.CodeInternal, "mounts", err)
	}
	if !r.OK {
		return provider.GrantStatus{}, &provider.Error{Code: r.Code, Layer: "mounts", Msg: r.Error}
	}
	st := provider.GrantStatus{Label: g.Label, Source: g.Source, Path: grantPath(g.Label, g.ReadOnly), ReadOnly: g.ReadOnly}
	if len(r.Absent) > 0 {
		st.Detail = "absent when granted, so not masked or protected: " + strings.Join(r.Absent, ", ")
	}
	if err := s.readBack(&st); err != nil {
		// Not in force: take it back, so nothing is left.
		_, _ = s.slots.call(slotReq{Op: "revoke", Label: g.Label, RO: g.ReadOnly})
		return provider.GrantStatus{}, provider.LayerError(provider.CodeInternal, "mounts", err)
	}
	rec := st
	s.live.list = append(s.live.list, &rec)
	return st, nil
}

// readBack fills st from init's mountinfo: effective, with its mount
// ids and Locked, or an error saying what the sandbox shows instead.
func (s *Sandbox) readBack(st *provider.GrantStatus) error {
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", s.initPID))
	if err != nil {
		return fmt.Errorf("read the sandbox's mountinfo: %w", err)
	}
	top, ok := grants.Top(es, st.Path)
	if !ok {
		st.State = provider.GrantMissing
		return fmt.Errorf("the sandbox shows no mount at %s", st.Path)
	}
	if st.ReadOnly && !top.ReadOnly() {
		st.State = provider.GrantMissing
		return fmt.Errorf("the sandbox's mount at %s is not read-only (%s)", st.Path, top.Options)
	}
	st.State, st.MountIDs, st.Locked = provider.GrantEffective, mountinfo.Subtree(es, top.ID), top.Master() != 0
	return nil
}

// RevokeFolder detaches grant label, checks the sandbox shows none of its
// mounts any more, and reports who still holds it; with kill those are
// sent SIGKILL (provider.LiveGrants). A grant revoked already is only
// looked at again (and its holders killed when asked). CodeNotFound for
// an unknown label; CodePolicyRejected for a sandbox without slots.
func (s *Sandbox) RevokeFolder(ctx context.Context, label string, kill bool) (provider.GrantStatus, error) {
	if s.slots == nil {
		return provider.GrantStatus{}, noSlots(s.id)
	}
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	g := s.live.find(label)
	if g == nil {
		return provider.GrantStatus{}, provider.Errorf(provider.CodeNotFound, "linux: sandbox %s has no grant %q", s.id, label)
	}
	if g.State == provider.GrantEffective || g.State == provider.GrantMissing {
		r, err := s.slots.call(slotReq{Op: "revoke", Label: label, RO: g.ReadOnly})
		if err != nil {
			return *g, provider.LayerError(provider.CodeInternal, "mounts", err)
		}
		if !r.OK {
			return *g, &provider.Error{Code: r.Code, Layer: "mounts", Msg: r.Error}
		}
		if err := s.gone(g); err != nil {
			return *g, provider.LayerError(provider.CodeInternal, "mounts", err)
		}
		g.State = provider.GrantRevoked
	}
	s.holders(g, kill)
	return *g, nil
}

// gone checks, in init's mountinfo, that no mount is at g's path and
// none of g's mounts is left.
func (s *Sandbox) gone(g *provider.GrantStatus) error {
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", s.initPID))
	if err != nil {
		return fmt.Errorf("read the sandbox's mountinfo: %w", err)
	}
	for _, e := range es {
		if e.Point == g.Path || slices.Contains(g.MountIDs, e.ID) {
			return fmt.Errorf("revoked, but the sandbox still shows mount %d at %s", e.ID, e.Point)
		}
	}
	return nil
}

// holders finds the sandbox's processes holding one of g's mounts (an
// fd, the cwd, the root: grants.Holders) and sets g's Holders and State;
// with kill each is sent SIGKILL first (grants.Kill: by pidfd, so a
// reused pid is never hit) and those that let go are marked Killed.
func (s *Sandbox) holders(g *provider.GrantStatus, kill bool) {
	hs := grants.Holders(s.initPID, g.MountIDs)
	if kill && len(hs) > 0 {
		hs = grants.Kill(s.initPID, g.MountIDs, hs)
	}
	g.Holders, g.State = nil, provider.GrantRevoked
	for _, h := range hs {
		g.Holders = append(g.Holders, provider.Holder(h))
		if !h.Killed {
			g.State = provider.GrantHeld
		}
	}
}

// FolderGrants are the grants made so far, revoked ones too, each read
// back now: an effective one the sandbox no longer shows is missing; a
// revoked one's holders are looked for again (provider.LiveGrants).
func (s *Sandbox) FolderGrants(ctx context.Context) ([]provider.GrantStatus, error) {
	if s.slots == nil {
		return nil, nil
	}
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	out := make([]provider.GrantStatus, 0, len(s.live.list))
	for _, g := range s.live.list {
		switch g.State {
		case provider.GrantEffective, provider.GrantMissing:
			st := *g
			if err := s.readBack(&st); err != nil {
				st.Detail = err.Error()
			}
			g.State, g.Detail = st.State, st.Detail
		default:
			s.holders(g, false)
		}
		out = append(out, *g)
	}
	return out, nil
}

// verifySlots checks, after Start, that a sandbox planned with slots shows
// them in /proc/<init>/mountinfo at provider.GrantSlots: read-only and a
// slave (master:N) of the holder's slot, so grants will reach it.
func (s *Sandbox) verifySlots() error {
	if !s.spec.slots() {
		return nil
	}
	es, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", s.initPID))
	if err != nil {
		return provider.LayerError(provider.CodeStartFailed, "mounts", err)
	}
	top, ok := grants.Top(es, provider.GrantSlots)
	switch {
	case !ok:
		err = fmt.Errorf("the sandbox shows no mount at %s", provider.GrantSlots)
	case top.Master() == 0:
		err = fmt.Errorf("%s is not a slave of the slot holder's slot (%s): grants would not reach it", provider.GrantSlots, strings.Join(top.Optional, " "))
	case !top.ReadOnly():
		err = fmt.Errorf("%s is not read-only (%s)", provider.GrantSlots, top.Options)
	}
	if err != nil {
		return &provider.Error{Code: provider.CodeStartFailed, Layer: "mounts", Msg: "verification failed", Err: err}
	}
	for i := range s.layers {
		if s.layers[i].Layer == "mounts" {
			s.layers[i].Detail += fmt.Sprintf("; grant slots at %s (a slave of master:%d)", provider.GrantSlots, top.Master())
		}
	}
	return nil
}
