//go:build linux

package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/store"
)

// ReconcileReport says what Reconcile did.
type ReconcileReport struct {
	Adopted  []string `json:"adopted"`  // ready records whose sandboxes run: held again
	Lost     []string `json:"lost"`     // ready records whose sandboxes are gone: now error
	Finished []string `json:"finished"` // interrupted provisioning, stop or delete: completed or undone
	Orphans  []string `json:"orphans"`  // containers no record owns: removed
	Foreign  []string `json:"foreign"`  // records of a provider this gateway does not run: left as they are
}

// Reconcile matches the stored sandboxes with what the provider runs,
// before the gateway serves: a ready record whose container runs is
// adopted (its layers verified from outside anew); one whose container is
// gone becomes error with the reason, and what is left of it is removed;
// a create interrupted by a crash is undone (error, nothing left running);
// an interrupted stop or delete is finished; a container the gateway made
// that no record owns is removed. Afterwards no record claims ready for a
// workload that does not run, and nothing runs that no record owns.
func (s *Server) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	recs, err := s.cfg.Store.List()
	if err != nil {
		return rep, err
	}
	owned := map[string]bool{}
	for _, r := range recs {
		owned[r.ID] = true
		if err := s.reconcileOne(ctx, r, &rep); err != nil {
			return rep, fmt.Errorf("sandbox %s: %w", r.ID, err)
		}
	}
	for _, p := range s.cfg.Providers {
		ids, err := p.Managed(ctx, s.cfg.Instance)
		if err != nil {
			return rep, err
		}
		for _, id := range ids {
			if !owned[id] {
				if err := p.Destroy(ctx, id); err != nil {
					return rep, err
				}
				rep.Orphans = append(rep.Orphans, id)
			}
		}
	}
	return rep, nil
}

func (s *Server) reconcileOne(ctx context.Context, r store.Sandbox, rep *ReconcileReport) error {
	set := func(phase, reason string) error {
		_, err := s.cfg.Store.Update(r.ID, r.Version, func(x *store.Sandbox) { x.Phase, x.Reason = phase, reason })
		return err
	}
	p, err := s.providerOf(r)
	if err != nil { // a provider this gateway does not run: touch nothing
		rep.Foreign = append(rep.Foreign, r.ID)
		return nil
	}
	switch r.Phase {
	case store.PhaseReady:
		// The policy as it maps now, for a provider that keeps no plan of
		// its own; one that no longer maps (an image gone) still gives the
		// session its rules, network and trees, the provider's saved plan
		// being what the sandbox enforces.
		creds, err := s.cfg.Store.Credentials(r.ID)
		if err != nil {
			return err
		}
		var plan *provider.Plan
		if _, mapped, _, err := s.mapPolicy(ctx, p, r.PolicyYAML, r.Image, r.Workdir, placeholders(creds)); err == nil {
			plan = mapped
		} else if res, err := s.resolvePolicy(r.PolicyYAML, r.Image, r.Workdir, placeholders(creds)); err == nil {
			plan = &provider.Plan{Provider: p.Name(), Policy: res}
		}
		h, err := s.recover(ctx, r, p, plan, creds)
		// A policy the session refuses now (a credential's source that
		// fails) is no guess: the sandbox cannot be served, as one gone.
		if code := provider.CodeOf(err); err != nil && code != provider.CodeNotFound && code != provider.CodePolicyRejected {
			return err // the provider could not say: destroy nothing on a guess
		}
		if err == nil {
			layers, _ := json.Marshal(h.sess.Layers())
			s.mu.Lock()
			s.putLive(r.ID, h)
			s.mu.Unlock()
			rep.Adopted = append(rep.Adopted, r.ID)
			s.event(r.ID, "adopted", "running after a gateway restart; layers verified from outside again")
			_, err = s.cfg.Store.Update(r.ID, r.Version, func(x *store.Sandbox) { x.Layers = string(layers) })
			return err
		}
		if derr := p.Destroy(ctx, r.ID); derr != nil {
			return derr
		}
		rep.Lost = append(rep.Lost, r.ID)
		s.event(r.ID, "lost", "not adoptable after a gateway restart: %v", err)
		return set(store.PhaseError, fmt.Sprintf("lost: %v", err))
	case store.PhaseProvisioning:
		if err := p.Destroy(ctx, r.ID); err != nil {
			return err
		}
		rep.Finished = append(rep.Finished, r.ID)
		s.event(r.ID, "error", "the gateway stopped while provisioning; what was made is removed")
		return set(store.PhaseError, "interrupted: the gateway stopped while provisioning (nothing is left running; create or recreate it)")
	case store.PhaseStopping, store.PhaseStopped:
		if err := p.Destroy(ctx, r.ID); err != nil {
			return err
		}
		if r.Phase == store.PhaseStopping {
			rep.Finished = append(rep.Finished, r.ID)
			s.event(r.ID, "stopped", "stop finished after a gateway restart")
			return set(store.PhaseStopped, "")
		}
		return nil
	case store.PhaseDeleting:
		if err := p.Destroy(ctx, r.ID); err != nil {
			return err
		}
		rep.Finished = append(rep.Finished, r.ID)
		s.removeLogs(r.ID)
		return s.cfg.Store.Delete(r.ID, r.Version)
	default: // error: nothing of it may run
		return p.Destroy(ctx, r.ID)
	}
}
