//go:build linux || windows

package gateway

import (
	"context"
	"encoding/json"
	"errors"
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
	// Unresolved are identities a provider would not remove on its own
	// (Orphaned): an mxc provision whose sandboxId never came back. They
	// are never provisioned again; an operator checks the host and removes
	// what Remedy names.
	Unresolved []Unresolved `json:"unresolved"`
	// Failed are sandboxes the provider could not reconcile now (a
	// deprovision refused, a provider that could not say whether one
	// runs): left as recorded, nothing destroyed on a guess, tried again
	// at the next start, and a delete tries again too. One of them does
	// not keep the gateway from serving the others.
	Failed []Failed `json:"failed"`
}

// Failed is one sandbox Reconcile left as it was, and why.
type Failed struct {
	ID  string `json:"id"`
	Err string `json:"error"`
}

// Unresolved is one orphan identity for the operator.
type Unresolved struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Remedy   string `json:"remedy"` // what to check, and the command or file to remove
}

// Orphaned is an error a provider's Destroy gives for a sandbox it must
// not remove on a guess (mxc's *OrphanError): what may be on the host has
// no name the provider can act on. OrphanRemedy says what an operator
// checks and removes.
type Orphaned interface {
	error
	OrphanRemedy() string
}

// destroy is p.Destroy(id), with an orphan noted in rep (and not an
// error): orphan says so.
func destroy(ctx context.Context, p Provider, id string, rep *ReconcileReport) (orphan bool, err error) {
	err = p.Destroy(ctx, id)
	var o Orphaned
	if errors.As(err, &o) {
		rep.Unresolved = append(rep.Unresolved, Unresolved{ID: id, Provider: p.Name(), Remedy: o.OrphanRemedy()})
		return true, nil
	}
	return false, err
}

// Reconcile matches the stored sandboxes with what the provider runs,
// before the gateway serves: a ready record whose container runs is
// adopted (its layers verified from outside anew); one whose container is
// gone becomes error with the reason, and what is left of it is removed;
// a create interrupted by a crash is undone (error, nothing left running);
// an interrupted stop or delete is finished; a container the gateway made
// that no record owns is removed. Afterwards no record claims ready for a
// workload that does not run, and nothing runs that no record owns —
// except what a provider cannot name (Orphaned), which is never
// provisioned again and is listed in Unresolved for the operator.
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
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			rep.Failed = append(rep.Failed, Failed{ID: r.ID, Err: err.Error()})
			s.event(r.ID, "error", "not reconciled after a gateway restart (left as recorded, tried again at the next start): %v", err)
		}
	}
	for _, p := range s.cfg.Providers {
		ids, err := p.Managed(ctx, s.cfg.Instance)
		if err != nil {
			return rep, err
		}
		for _, id := range ids {
			if !owned[id] {
				orphan, err := destroy(ctx, p, id, &rep)
				if err != nil {
					rep.Failed = append(rep.Failed, Failed{ID: id, Err: "an orphan no record owns, not removed: " + err.Error()})
					continue
				}
				if !orphan {
					rep.Orphans = append(rep.Orphans, id)
				}
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
		if _, derr := destroy(ctx, p, r.ID, rep); derr != nil {
			return derr
		}
		rep.Lost = append(rep.Lost, r.ID)
		s.event(r.ID, "lost", "not adoptable after a gateway restart: %v", err)
		return set(store.PhaseError, fmt.Sprintf("lost: %v", err))
	case store.PhaseProvisioning:
		orphan, err := destroy(ctx, p, r.ID, rep)
		if err != nil {
			return err
		}
		if orphan { // never provisioned again: the operator's
			s.event(r.ID, "error", "the gateway stopped while provisioning, and the provider cannot name what it made: an orphan for the operator")
			return set(store.PhaseError, "interrupted: the gateway stopped while provisioning; orphan: "+rep.Unresolved[len(rep.Unresolved)-1].Remedy)
		}
		rep.Finished = append(rep.Finished, r.ID)
		s.event(r.ID, "error", "the gateway stopped while provisioning; what was made is removed")
		return set(store.PhaseError, "interrupted: the gateway stopped while provisioning (nothing is left running; create or recreate it)")
	case store.PhaseStopping, store.PhaseStopped:
		if _, err := destroy(ctx, p, r.ID, rep); err != nil {
			return err
		}
		if r.Phase == store.PhaseStopping {
			rep.Finished = append(rep.Finished, r.ID)
			s.event(r.ID, "stopped", "stop finished after a gateway restart")
			return set(store.PhaseStopped, "")
		}
		return nil
	case store.PhaseDeleting:
		if _, err := destroy(ctx, p, r.ID, rep); err != nil { // an orphan stays listed (Managed) once its record is gone
			return err
		}
		rep.Finished = append(rep.Finished, r.ID)
		s.removeLogs(r.ID)
		return s.cfg.Store.Delete(r.ID, r.Version)
	default: // error: nothing of it may run
		_, err := destroy(ctx, p, r.ID, rep)
		return err
	}
}
