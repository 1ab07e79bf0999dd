//go:build linux || windows

package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/session"
	"github.com/corral-sandbox/corral/store"
)

// A gateway sandbox's credentials: the placeholder of each is drawn at
// create and stored, so that a stop and start, a recreate or a gateway
// restart shows the sandbox the same one; a stored credential's value is
// the caller's (CreateSandboxRequest.credentials, SetCredential), kept in
// the store and handed to the session as Secrets; file and command
// sources are read by the session on the gateway's host at every start.
// No value is ever in a response, an event, a log or an error.

// checkSources refuses what a gateway sandbox's credentials cannot read:
// the gateway's own environment is not its caller's, and reading it for a
// policy would hand the daemon's variables to whoever writes the policy.
func checkSources(res *policy.Resolved) error {
	for _, c := range res.Credentials {
		if c.Source.Env != "" {
			return fmt.Errorf("%s.source: env %s: a gateway sandbox does not read the gateway's environment; use source: {stored: true} and give the value at create (corral sandbox create --credential %s=env:%s reads it from yours)", c.Field, c.Source.Env, c.Name, c.Source.Env)
		}
	}
	return nil
}

// checkValue refuses, before anything is stored or made, a value the
// session would refuse when it starts.
func checkValue(name, v string) error {
	if err := session.CheckCredentialValue(v); err != nil {
		return fmt.Errorf("credential %s: %v", name, err)
	}
	return nil
}

// parseExpires reads an RFC 3339 expiry ("" is none); one already past
// is refused.
func parseExpires(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("credential %s: expires %q: want RFC 3339 (2026-01-02T15:04:05Z)", name, s)
	}
	if !t.After(time.Now()) {
		return time.Time{}, fmt.Errorf("credential %s: expires %s is not in the future", name, t.UTC().Format(time.RFC3339))
	}
	return t.UTC(), nil
}

// credentialRows are the store's rows for res's credentials: each with
// the placeholder res drew (or kept), a stored one with its value from
// given or, failing that, from have (a recreate: what the sandbox has).
// A stored credential without a value, a value for a name that is not a
// stored credential of the policy, or a name given twice is refused
// (InvalidArgument), before anything is made.
func credentialRows(res *policy.Resolved, given []*gw.CredentialValue, have []store.Credential) ([]store.Credential, error) {
	bad := func(format string, args ...any) error {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
	}
	byName := map[string]*gw.CredentialValue{}
	for _, g := range given {
		i := slices.IndexFunc(res.Credentials, func(c policy.ResolvedCredential) bool { return c.Name == g.Name })
		switch {
		case byName[g.Name] != nil:
			return nil, bad("credential %s is given twice", g.Name)
		case i < 0:
			return nil, bad("credential %s: the policy has no credential of that name%s", g.Name, named(res))
		case !res.Credentials[i].Source.Stored:
			return nil, bad("credential %s: %s.source is %s, read on the gateway's host at every start: only a stored credential (source: {stored: true}) takes a value", g.Name, res.Credentials[i].Field, res.Credentials[i].Source.Kind())
		}
		if err := checkValue(g.Name, g.Value); err != nil {
			return nil, bad("%v", err)
		}
		byName[g.Name] = g
	}
	var rows []store.Credential
	for _, c := range res.Credentials {
		row := store.Credential{Name: c.Name}
		if i := slices.IndexFunc(have, func(h store.Credential) bool { return h.Name == c.Name }); i >= 0 {
			row = have[i]
		}
		row.Placeholder = c.Placeholder
		if g := byName[c.Name]; g != nil {
			exp, err := parseExpires(c.Name, g.Expires)
			if err != nil {
				return nil, bad("%v", err)
			}
			row.Value, row.Expires, row.Revoked = g.Value, exp, false
		}
		if !c.Source.Stored {
			row.Value = ""
		} else if row.Value == "" && !row.Revoked {
			return nil, bad("credential %s is stored (%s.source: {stored: true}) and has no value: give it with --credential %s=env:VAR, =file:PATH or =- (one line from stdin)", c.Name, c.Field, c.Name)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// named is " (it has a, b)" of res's credentials, for an error.
func named(res *policy.Resolved) string {
	if len(res.Credentials) == 0 {
		return " (it has none)"
	}
	return " (it has " + strings.Join(credentialNames(res), ", ") + ")"
}

func credentialNames(res *policy.Resolved) []string {
	var out []string
	for _, c := range res.Credentials {
		out = append(out, c.Name)
	}
	return out
}

// placeholders are the stored placeholders, by credential name.
func placeholders(creds []store.Credential) map[string]string {
	out := map[string]string{}
	for _, c := range creds {
		out[c.Name] = c.Placeholder
	}
	return out
}

// secrets are the session's values of res's stored credentials (a
// revoked one has none: the store forgot it), and states their stored
// revocations and expiries, which the session puts in force before its
// proxy serves.
func secrets(res *policy.Resolved, creds []store.Credential) (map[string]string, map[string]session.CredentialState) {
	values, states := map[string]string{}, map[string]session.CredentialState{}
	for _, c := range creds {
		states[c.Name] = session.CredentialState{Revoked: c.Revoked, Expires: c.Expires}
		if i := slices.IndexFunc(res.Credentials, func(r policy.ResolvedCredential) bool { return r.Name == c.Name }); i >= 0 && res.Credentials[i].Source.Stored && !c.Revoked {
			values[c.Name] = c.Value
		}
	}
	return values, states
}

// credentialCall is a credential call's hold on sandbox id: its gate
// shared (as an exec's, ending none) and its credential changes
// serialised; the record and its policy's credential name, which must
// exist. The caller defers done.
func (s *Server) credentialCall(id, name string) (rec store.Sandbox, c policy.Credential, done func(), err error) {
	id = s.idOf(id)
	if _, err := s.cfg.Store.Get(id); err != nil {
		return rec, c, nil, storeErr(id, err) // before making a gate for an id that does not exist
	}
	g := s.gate(id)
	g.rw.RLock()
	g.creds.Lock()
	unlock := func() { g.creds.Unlock(); g.rw.RUnlock() }
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	if rec, err = s.cfg.Store.Get(id); err != nil {
		return rec, c, nil, storeErr(id, err)
	}
	pol, err := parseOrDefault(rec.PolicyYAML)
	if err != nil {
		return rec, c, nil, connect.NewError(connect.CodeInternal, err)
	}
	i := slices.IndexFunc(pol.Credentials, func(c policy.Credential) bool { return c.Name == name })
	if i < 0 {
		var names []string
		for _, c := range pol.Credentials {
			names = append(names, c.Name)
		}
		list := "it has none"
		if len(names) > 0 {
			list = "it has " + strings.Join(names, ", ")
		}
		return rec, c, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox %s has no credential %q (%s)", id, name, list))
	}
	return rec, pol.Credentials[i], unlock, nil
}

// liveSession is the session of sandbox id if this gateway holds it.
func (s *Server) liveSession(id string) *session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.live[id]; h != nil {
		return h.sess
	}
	return nil
}

// SetCredential gives a stored credential a new value (and expiry): stored
// first, then put in force in the running sandbox's proxy, whose
// placeholder stays. A stopped sandbox gets it at its next start.
func (s *Server) SetCredential(ctx context.Context, req *connect.Request[gw.SetCredentialRequest]) (*connect.Response[gw.SetCredentialResponse], error) {
	v := req.Msg.Credential
	if v == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no credential given"))
	}
	rec, c, done, err := s.credentialCall(req.Msg.Id, v.Name)
	if err != nil {
		return nil, err
	}
	defer done()
	if !c.Source.Stored {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("credential %s: its source is %s, read on the gateway's host at every start: change it there; only a stored credential (source: {stored: true}) takes a value", c.Name, c.Source.Kind()))
	}
	if err := checkValue(c.Name, v.Value); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	exp, err := parseExpires(c.Name, v.Expires)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := s.cfg.Store.SetCredential(rec.ID, c.Name, v.Value, exp); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if sess := s.liveSession(rec.ID); sess != nil {
		if err := sess.SetCredential(c.Name, v.Value, exp); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("credential %s: stored, but the running sandbox did not take it: %w", c.Name, err))
		}
	}
	until := ""
	if !exp.IsZero() {
		until = " until " + exp.Format(time.RFC3339)
	}
	s.event(rec.ID, "credential", "%s: a new value in force%s (the placeholder stays)", c.Name, until)
	return connect.NewResponse(&gw.SetCredentialResponse{Credential: s.credentialStatus(rec.ID, c)}), nil
}

// RevokeCredential ends a credential: stored first (a stored value is
// forgotten), then the running sandbox's proxy refuses its placeholder
// wherever it appears; it stays revoked across starts and gateway
// restarts until SetCredential gives it a value again.
func (s *Server) RevokeCredential(ctx context.Context, req *connect.Request[gw.RevokeCredentialRequest]) (*connect.Response[gw.RevokeCredentialResponse], error) {
	rec, c, done, err := s.credentialCall(req.Msg.Id, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.cfg.Store.RevokeCredential(rec.ID, c.Name); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if sess := s.liveSession(rec.ID); sess != nil {
		if err := sess.RevokeCredential(c.Name); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("credential %s: revoked in the store, but the running sandbox did not take it: %w", c.Name, err))
		}
	}
	s.event(rec.ID, "credential", "%s: revoked", c.Name)
	return connect.NewResponse(&gw.RevokeCredentialResponse{Credential: s.credentialStatus(rec.ID, c)}), nil
}

// ListCredentials lists the sandbox's credentials: name, state, expiry
// and the kind of source (never a value or a placeholder).
func (s *Server) ListCredentials(ctx context.Context, req *connect.Request[gw.ListCredentialsRequest]) (*connect.Response[gw.ListCredentialsResponse], error) {
	id := s.idOf(req.Msg.Id)
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return nil, storeErr(id, err)
	}
	pol, err := parseOrDefault(rec.PolicyYAML)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &gw.ListCredentialsResponse{}
	for _, c := range pol.Credentials {
		out.Credentials = append(out.Credentials, s.credentialStatus(id, c))
	}
	return connect.NewResponse(out), nil
}

// credentialStatus is credential c of sandbox id as its running proxy
// has it, or as stored when the sandbox does not run here.
func (s *Server) credentialStatus(id string, c policy.Credential) *gw.Credential {
	out := &gw.Credential{Name: c.Name, Source: c.Source.Kind(), State: "active"}
	var exp time.Time
	if sess := s.liveSession(id); sess != nil {
		sts := sess.Credentials()
		if i := slices.IndexFunc(sts, func(st session.CredentialStatus) bool { return st.Name == c.Name }); i >= 0 {
			out.State, exp = sts[i].State, sts[i].Expires
		}
	} else if rows, err := s.cfg.Store.Credentials(id); err == nil {
		if i := slices.IndexFunc(rows, func(r store.Credential) bool { return r.Name == c.Name }); i >= 0 {
			exp = rows[i].Expires
			switch {
			case rows[i].Revoked:
				out.State = "revoked"
			case !exp.IsZero() && !time.Now().Before(exp):
				out.State = "expired"
			}
		}
	}
	if !exp.IsZero() {
		out.Expires = exp.UTC().Format(time.RFC3339)
	}
	return out
}
