package web

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// fakeAPI is the approvers' API as consent.ApproverHandler documents it
// (GET /v1/approvals, POST .../approve|deny, GET /v1/grants, POST
// /v1/grants/{id}/revoke, GET /v1/approvals/watch as SSE), over an
// in-memory set of requests, applying through an Applier: the page's
// tests run against it until the broker lands.
type fakeAPI struct {
	mu       sync.Mutex
	reqs     []*consent.Request
	grants   []*consent.Grant
	watchers map[chan consent.Event]bool
	applier  consent.Applier
	// cookies records any Cookie header the API was handed.
	cookies []string
	n       int
}

func newFakeAPI(a consent.Applier) *fakeAPI {
	return &fakeAPI{watchers: map[chan consent.Event]bool{}, applier: a}
}

// watching is how many watchers are connected.
func (f *fakeAPI) watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

// ask makes a pending request (the broker's Ask with an approver
// connected).
func (f *fakeAPI) ask(sandbox string, a consent.Ask, who consent.Requester) consent.Request {
	f.mu.Lock()
	f.n++
	now := time.Now()
	q := &consent.Request{ID: fmt.Sprintf("r%d", f.n), Sandbox: sandbox, Kind: a.Kind, Target: a.Target, Access: a.Access,
		Reason: a.Reason, Asked: 1, Requester: who, Created: now, Expires: now.Add(10 * time.Minute),
		Digest: fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(a.Target+string(a.Access)))), Ceiling: "consent.folders.ask[0]", State: consent.StatePending}
	f.reqs = append([]*consent.Request{q}, f.reqs...)
	out := *q
	f.mu.Unlock()
	f.emit(consent.Event{Activity: "requested", Time: now, Request: &out})
	return out
}

func (f *fakeAPI) get(id string) (consent.Request, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.reqs {
		if q.ID == id {
			return *q, true
		}
	}
	return consent.Request{}, false
}

func (f *fakeAPI) emit(e consent.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.watchers {
		select {
		case c <- e:
		default:
		}
	}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if c := r.Header.Get("Cookie"); c != "" {
		f.cookies = append(f.cookies, c)
	}
	f.mu.Unlock()
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && p == "/v1/approvals/watch":
		f.watch(w, r)
	case r.Method == http.MethodGet && p == "/v1/approvals":
		f.mu.Lock()
		out := copies(f.reqs)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case r.Method == http.MethodGet && p == "/v1/grants":
		f.mu.Lock()
		out := copies(f.grants)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/v1/approvals/"):
		id, verb, _ := strings.Cut(strings.TrimPrefix(p, "/v1/approvals/"), "/")
		f.decide(w, r, id, verb)
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/v1/grants/") && strings.HasSuffix(p, "/revoke"):
		f.revoke(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/grants/"), "/revoke"))
	default:
		http.NotFound(w, r)
	}
}

// copies are the values of ps ([] for none, as the API answers).
func copies[T any](ps []*T) []T {
	out := []T{}
	for _, p := range ps {
		out = append(out, *p)
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request) {
	c := make(chan consent.Event, 64)
	f.mu.Lock()
	f.watchers[c] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.watchers, c)
		f.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fmt.Fprint(w, ": watching\n\n")
	fl.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case e := <-c:
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "event: consent\ndata: %s\n\n", b)
			fl.Flush()
		}
	}
}

func (f *fakeAPI) decide(w http.ResponseWriter, r *http.Request, id, verb string) {
	var body struct {
		Scope      consent.Scope `json:"scope"`
		TTL        string        `json:"ttl"`
		Digest     string        `json:"digest"`
		ReadOnly   bool          `json:"read_only"`
		Reason     string        `json:"reason"`
		ForSession bool          `json:"for_session"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	var q *consent.Request
	for _, x := range f.reqs {
		if x.ID == id {
			q = x
		}
	}
	switch {
	case q == nil:
		f.mu.Unlock()
		http.NotFound(w, r)
		return
	case q.State != consent.StatePending:
		f.mu.Unlock()
		http.Error(w, "already decided", http.StatusConflict)
		return
	case body.Digest != q.Digest:
		f.mu.Unlock()
		http.Error(w, "digest mismatch", http.StatusConflict)
		return
	}
	d := &consent.Decision{Approve: verb == "approve", Scope: body.Scope, Digest: body.Digest, ReadOnly: body.ReadOnly,
		By: "web page", Reason: body.Reason, At: time.Now(), ForSession: body.ForSession}
	q.Decision = d
	var g *consent.Grant
	if verb == "approve" {
		q.State = consent.StateApproved
		if body.Scope == consent.ScopeTTL {
			ttl, err := time.ParseDuration(body.TTL)
			if err != nil {
				f.mu.Unlock()
				http.Error(w, "ttl: "+err.Error(), http.StatusBadRequest)
				return
			}
			d.Expires = time.Now().Add(ttl)
		}
		access := q.Access
		if body.ReadOnly {
			access = policy.AccessReadOnly
		}
		g = &consent.Grant{ID: "g" + q.ID, Sandbox: q.Sandbox, Request: q.ID, Kind: q.Kind, Target: q.Target, Access: access,
			Scope: body.Scope, Expires: d.Expires, Desired: true, Mode: provider.ConsentLive}
		f.grants = append(f.grants, g)
		q.Grant = g.ID
	} else {
		q.State = consent.StateDenied
		q.Detail = "denied by web page: " + body.Reason
	}
	f.mu.Unlock()
	if g != nil {
		st, err := f.applier.ApplyFolder(r.Context(), provider.FolderGrant{Label: g.ID, Source: g.Target, ReadOnly: g.Access != policy.AccessReadWrite})
		f.mu.Lock()
		g.Folder = &st
		if err != nil {
			q.State, q.Detail = consent.StateFailed, err.Error()
		} else {
			g.Effective, q.Effective, g.Path = true, true, st.Path
		}
		f.mu.Unlock()
	}
	out, _ := f.get(id)
	f.emit(consent.Event{Activity: string(out.State), Time: time.Now(), Request: &out, By: "web page"})
	writeJSON(w, http.StatusOK, out)
}

func (f *fakeAPI) revoke(w http.ResponseWriter, r *http.Request, id string) {
	var body struct {
		Kill bool `json:"kill"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	var g *consent.Grant
	for _, x := range f.grants {
		if x.ID == id {
			g = x
		}
	}
	f.mu.Unlock()
	if g == nil {
		http.NotFound(w, r)
		return
	}
	st, err := f.applier.RevokeFolder(r.Context(), g.ID, body.Kill)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f.mu.Lock()
	g.Desired, g.Effective, g.Folder = false, false, &st
	out := *g
	f.mu.Unlock()
	f.emit(consent.Event{Activity: "revoked", Time: time.Now(), Grant: &out, By: "web page"})
	writeJSON(w, http.StatusOK, out)
}

// fakeApplier records what it is asked to apply and reports it in force.
type fakeApplier struct {
	mu      sync.Mutex
	applied []provider.FolderGrant
	revoked []string
}

func (a *fakeApplier) Mode(consent.Kind) provider.ConsentMode { return provider.ConsentLive }

func (a *fakeApplier) ApplyFolder(_ context.Context, g provider.FolderGrant) (provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = append(a.applied, g)
	slot := "/grants/rw/"
	if g.ReadOnly {
		slot = "/grants/ro/"
	}
	return provider.GrantStatus{Label: g.Label, Source: g.Source, Path: slot + g.Label, ReadOnly: g.ReadOnly,
		State: provider.GrantEffective, MountIDs: []int{400 + len(a.applied)}, Locked: true}, nil
}

func (a *fakeApplier) RevokeFolder(_ context.Context, label string, kill bool) (provider.GrantStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revoked = append(a.revoked, label)
	return provider.GrantStatus{Label: label, State: provider.GrantHeld,
		Holders: []provider.Holder{{PID: 812, FD: 3, Path: "/grants/ro/" + label + "/a.txt", Exe: "/usr/bin/cat", Killed: kill}}}, nil
}

func (a *fakeApplier) FolderGrants(context.Context) ([]provider.GrantStatus, error) { return nil, nil }

func (a *fakeApplier) AllowHost(context.Context, string, int) (int, error)    { return 1, nil }
func (a *fakeApplier) DisallowHost(context.Context, string, int) (int, error) { return 2, nil }

func (a *fakeApplier) appliedGrants() []provider.FolderGrant {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]provider.FolderGrant(nil), a.applied...)
}
