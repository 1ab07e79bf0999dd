//go:build linux || windows

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"connectrpc.com/connect"

	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/session"
	"github.com/corral-sandbox/corral/store"
)

func (s *Server) GetPolicy(ctx context.Context, req *connect.Request[gw.GetPolicyRequest]) (*connect.Response[gw.GetPolicyResponse], error) {
	req.Msg.Id = s.idOf(req.Msg.Id)
	rec, err := s.cfg.Store.Get(req.Msg.Id)
	if err != nil {
		return nil, storeErr(req.Msg.Id, err)
	}
	revs, err := s.cfg.Store.Revisions(req.Msg.Id)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	for _, r := range revs {
		if r.Revision == rec.PolicyRevision {
			return connect.NewResponse(&gw.GetPolicyResponse{Policy: toRevision(r)}), nil
		}
	}
	return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: revision %d is not stored", rec.ID, rec.PolicyRevision))
}

func (s *Server) PolicyHistory(ctx context.Context, req *connect.Request[gw.PolicyHistoryRequest]) (*connect.Response[gw.PolicyHistoryResponse], error) {
	req.Msg.Id = s.idOf(req.Msg.Id)
	if _, err := s.cfg.Store.Get(req.Msg.Id); err != nil {
		return nil, storeErr(req.Msg.Id, err)
	}
	revs, err := s.cfg.Store.Revisions(req.Msg.Id)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &gw.PolicyHistoryResponse{}
	for _, r := range revs {
		out.Revisions = append(out.Revisions, toRevision(r))
	}
	return connect.NewResponse(out), nil
}

// SetPolicy makes a new policy revision the sandbox's. When only the
// egress rules differ (network allow, deny, allow_private, hosts) it is
// applied live: the sandbox's egress proxy is replaced by one with the new
// rules, nothing else changes. Any other difference needs the sandbox to
// be recreated (same id, new container), which happens only when the
// request says recreate; otherwise it is refused, naming why.
func (s *Server) SetPolicy(ctx context.Context, req *connect.Request[gw.SetPolicyRequest]) (*connect.Response[gw.SetPolicyResponse], error) {
	m := req.Msg
	m.Id = s.idOf(m.Id)
	rec, unlock, err := s.lockRecord(m.Id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if m.ExpectedRevision != 0 && m.ExpectedRevision != rec.PolicyRevision {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("sandbox %s is at policy revision %d, not %d", m.Id, rec.PolicyRevision, m.ExpectedRevision))
	}
	if rec.Phase != store.PhaseReady {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is %s, not ready", m.Id, rec.Phase))
	}
	p, err := s.providerOf(rec)
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	have, err := s.cfg.Store.Credentials(m.Id)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	res, plan, loss, err := s.mapPolicy(ctx, p, m.PolicyYaml, rec.Image, rec.Workdir, placeholders(have))
	if err != nil {
		return nil, err
	}
	// The values of stored credentials the new policy adds, checked
	// before anything changes; a live change has the same credentials.
	creds, err := credentialRows(res, m.Credentials, have)
	if err != nil {
		return nil, err
	}
	old, err := parseOrDefault(rec.PolicyYAML)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if rec.Image != "" && (old.Docker == nil || old.Docker.Image == "") {
		old.Docker = &policy.Docker{Image: rec.Image} // as mapPolicy did for both
	}
	if len(m.Credentials) > 0 && (!m.Recreate || res.Hash == rec.PolicyHash || onlyEgressRules(old, res.Policy)) {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("credential values go with a policy that adds stored credentials, applied with --recreate; a credential the sandbox has changes with corral sandbox credential set"))
	}
	if res.Hash == rec.PolicyHash { // the same policy: nothing to apply, no new revision
		revs, err := s.cfg.Store.Revisions(m.Id)
		if err != nil || len(revs) == 0 {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: revisions: %v", m.Id, err))
		}
		return connect.NewResponse(&gw.SetPolicyResponse{Sandbox: toProto(rec), Policy: toRevision(revs[len(revs)-1])}), nil
	}
	if onlyEgressRules(old, res.Policy) {
		s.mu.Lock()
		h := s.live[m.Id]
		s.mu.Unlock()
		apply := func(bool) error { return nil }
		switch {
		case res.Network != policy.NetworkProxy:
		case h != nil:
			apply, err = h.sess.PrepareEgress(res.Egress)
		default:
			err = session.CheckRules(res.Egress)
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("egress rules: %w", err))
		}
		// Stored first: the proxy never enforces rules the record does not
		// show; it was built before, so it cannot fail now on the rules.
		rec, rev, err := s.cfg.Store.SetPolicy(m.Id, rec.Version, m.PolicyYaml, res.Hash, "live", func(*store.Sandbox) {})
		if err != nil {
			_ = apply(false)
			return nil, storeErr(m.Id, err)
		}
		if err := apply(true); err != nil { // the session was closed meanwhile
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		s.event(m.Id, "policy", "revision %d applied live (egress rules)", rev)
		return s.policyResponse(rec, rev)
	}
	if !m.Recreate {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("requires recreate: the change goes beyond the egress rules (network allow, deny, allow_private, hosts), which are all a running sandbox can take; recreate (corral policy set --recreate) replaces the sandbox, ending what runs in it"))
	}
	rec, err = s.cfg.Store.Update(m.Id, rec.Version, func(r *store.Sandbox) {
		r.Phase, r.Reason = store.PhaseProvisioning, fmt.Sprintf("recreating for policy revision %d", rec.PolicyRevision+1)
	})
	if err != nil {
		return nil, storeErr(m.Id, err)
	}
	// The new credentials' placeholders are stored before the sandbox that
	// shows them is made, so a restart finds them whatever happens next.
	if err := s.cfg.Store.PutCredentials(m.Id, creds); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	work := context.WithoutCancel(ctx)
	if err := s.release(work, m.Id, p); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	sb, err := s.bringUp(work, m.Id, p, plan, creds)
	if err != nil {
		s.event(m.Id, "error", "recreate: %v", err)
		_, _ = s.cfg.Store.Update(m.Id, rec.Version, func(r *store.Sandbox) { r.Phase, r.Reason = store.PhaseError, "recreate: "+err.Error() })
		return nil, connect.NewError(connect.CodeUnknown, fmt.Errorf("sandbox %s: recreate: %w", m.Id, err))
	}
	layers, _ := json.Marshal(sb.sess.Layers())
	lossJSON, _ := json.Marshal(loss)
	rec, rev, err := s.cfg.Store.SetPolicy(m.Id, rec.Version, m.PolicyYaml, res.Hash, "recreated", func(r *store.Sandbox) {
		r.Phase, r.Reason, r.Layers, r.Losses, r.ProviderState = store.PhaseReady, "", string(layers), string(lossJSON), sb.state()
	})
	if err != nil {
		return nil, storeErr(m.Id, err)
	}
	s.mu.Lock()
	s.putLive(m.Id, sb)
	s.mu.Unlock()
	if err := s.cfg.Store.KeepCredentials(m.Id, credentialNames(res)); err != nil { // those the new policy dropped
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	s.event(m.Id, "policy", "revision %d applied by recreating the sandbox", rev)
	return s.policyResponse(rec, rev)
}

func (s *Server) policyResponse(rec store.Sandbox, rev int64) (*connect.Response[gw.SetPolicyResponse], error) {
	revs, err := s.cfg.Store.Revisions(rec.ID)
	if err != nil || len(revs) == 0 || revs[len(revs)-1].Revision != rev {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: revision %d not stored (%v)", rec.ID, rev, err))
	}
	return connect.NewResponse(&gw.SetPolicyResponse{Sandbox: toProto(rec), Policy: toRevision(revs[len(revs)-1])}), nil
}

// onlyEgressRules reports whether a and b differ at most in the egress
// rules, which the proxy can take live (same canonical hash otherwise).
func onlyEgressRules(a, b *policy.Policy) bool {
	strip := func(p *policy.Policy) string {
		c := *p
		c.Network.Allow, c.Network.Deny, c.Network.AllowPrivate, c.Network.Hosts = nil, nil, nil, nil
		return policy.Hash(&c)
	}
	return strip(a) == strip(b)
}

func parseOrDefault(yaml string) (*policy.Policy, error) {
	if yaml == "" {
		return policy.Default(), nil
	}
	return policy.Parse([]byte(yaml), "policy")
}

func toRevision(r store.Revision) *gw.PolicyRevision {
	return &gw.PolicyRevision{Revision: r.Revision, PolicyYaml: r.PolicyYAML, PolicyHash: r.PolicyHash, Applied: r.Applied,
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339)}
}
