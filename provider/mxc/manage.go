package mxc

// The provider as a control plane's (provider.Manager): its persistent
// isolation_session sandboxes and its managed process_container ones
// listed by owner from their records, and removed from whatever state a
// crash left them in.

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/corral-sandbox/corral/provider"
)

var _ provider.Manager = (*Provider)(nil)

// standsForSession reports whether a record in state st may still name,
// or stand for, an MXC session: everything but the end states.
func standsForSession(st State) bool {
	switch st {
	case StateDeprovisioned, StateFailed, StateStale:
		return false
	}
	return true
}

// Managed lists the local ids of owner's isolation_session records that
// may still stand for a session (provisioning, orphaned, provisioned,
// started, stopped, deprovisioning) and of owner's process_container
// records (a sandbox that ended with its control plane, until Destroy),
// oldest first. An unreadable record
// fails the whole list: a control plane must not take a partial list for
// all it owns.
func (p *Provider) Managed(ctx context.Context, owner string) ([]string, error) {
	recs, err := p.store().list()
	if err != nil {
		return nil, provider.Wrap(provider.CodeInternal, "mxc records in "+p.stateDir, err)
	}
	var out []string
	for _, r := range recs {
		// A process_container record stands, whatever its state, until
		// Deprovision or Destroy removes it.
		if r.Owner == owner && (r.Backend == BackendProcessContainer || standsForSession(r.PhaseState)) {
			out = append(out, r.LocalID)
		}
	}
	return out, nil
}

// OrphanError is Destroy's answer for an orphan: a record whose provision
// never returned a sandboxId, its provisioner gone. An agent user and
// session may exist that nothing names, and MXC has no list call, so the
// provider neither provisions again nor guesses: the record stays (state
// orphaned) until an operator has checked the host and removed it.
// errors.As finds it; provider.CodeOf gives CodeStale.
type OrphanError struct {
	ID        string // the local id
	Record    string // the record's path
	LastError string // why provision did not answer, as recorded
}

func (e *OrphanError) Error() string {
	return fmt.Sprintf("mxc sandbox %s is an orphan: %s", e.ID, e.OrphanRemedy())
}

// OrphanRemedy says what the operator must do, with the file to remove.
func (e *OrphanError) OrphanRemedy() string {
	rm := "rm '" + e.Record + "'"
	if runtime.GOOS == "windows" {
		rm = `del "` + e.Record + `"`
	}
	why := ""
	if e.LastError != "" {
		why = " (" + e.LastError + ")"
	}
	return "its provision never returned a sandboxId" + why + ", so an MXC agent user and session may exist that nothing names; check the host's MXC agent users and remove the one no sandbox uses, then remove the record: " + rm
}

// Unwrap gives the taxonomy code: CodeStale (the record is not what it
// claims to be; nothing was done).
func (e *OrphanError) Unwrap() error {
	return &provider.Error{Code: provider.CodeStale, Msg: "orphan record " + e.Record}
}

// Destroy removes sandbox id whatever state its record is in, finishing
// what a crash interrupted: a started session is stopped (a stop that
// fails with an answer, such as one already stopped, goes on to
// deprovision), then deprovisioned, and the record is removed; a session
// MXC answers stale_id for is gone already, and only its record is
// removed. A record in an end state (deprovisioned, failed, stale) is
// removed. No record, or an id that is not the provider's: nothing there,
// nil. An orphan (provisioning with no sandboxId, its provisioner gone,
// or orphaned) is left as it is, marked orphaned, and answered with an
// *OrphanError; a provision of another live process under way, CodeStale.
// A process_container record: destroyContainer.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if !localIDPattern().MatchString(id) {
		return nil
	}
	st := p.store()
	rec, err := st.read(id)
	if provider.CodeOf(err) == provider.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if rec.Backend == BackendProcessContainer {
		return p.destroyContainer(ctx, st, rec)
	}
	switch rec.PhaseState {
	case StateProvisioning, StateOrphaned:
		if st.heldByOther(id) {
			return provider.Errorf(provider.CodeStale, "sandbox %s is being provisioned by another process", id)
		}
		_, _ = p.reattach(ctx, id, nil) // marks a provisioning record orphaned, under its lock
		cur, err := st.read(id)
		if provider.CodeOf(err) == provider.CodeNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.PhaseState != StateProvisioning && cur.PhaseState != StateOrphaned {
			return p.Destroy(ctx, id) // a provision of this process finished meanwhile
		}
		return &OrphanError{ID: id, Record: st.path(id), LastError: cur.LastError}
	case StateDeprovisioned, StateFailed, StateStale:
		return p.removeRecord(ctx, st, id)
	}
	sb, err := p.reattach(ctx, id, nil)
	switch provider.CodeOf(err) {
	case provider.CodeNotFound:
		return p.removeRecord(ctx, st, id) // its session is gone (stale now), or the record is
	case provider.CodeStale:
		if cur, rerr := st.read(id); rerr == nil && !standsForSession(cur.PhaseState) {
			return p.removeRecord(ctx, st, id)
		}
		return err
	}
	if err != nil {
		return err
	}
	s := sb.(*session)
	serr := s.Stop(ctx)
	if !standsForSession(s.Record().PhaseState) { // stale_id: gone
		return p.removeRecord(ctx, st, id)
	}
	if derr := s.Deprovision(ctx); derr != nil && standsForSession(s.Record().PhaseState) {
		return errors.Join(derr, serr)
	}
	return p.removeRecord(ctx, st, id)
}

// removeRecord removes id's record under its lifecycle lock, if it is
// (still) in an end state.
func (p *Provider) removeRecord(ctx context.Context, st store, id string) error {
	lk, err := st.lock(ctx, id)
	if err != nil {
		return err
	}
	defer lk.unlock()
	rec, err := st.read(id)
	if provider.CodeOf(err) == provider.CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if standsForSession(rec.PhaseState) {
		return provider.Errorf(provider.CodeStale, "sandbox %s moved to %s meanwhile", id, rec.PhaseState)
	}
	if err := st.remove(id); err != nil {
		return provider.Wrap(provider.CodeInternal, "removing the record of "+id, err)
	}
	return nil
}
