package consent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/policy"
)

// MaxBody bounds a request body (bytes): 64 KiB.
const MaxBody = 64 << 10

// apiError is every error body: what went wrong and how to fix it.
type apiError struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeErr answers err with its status: 400 malformed, 404 unknown, 409
// decided or changed, 410 the session ended, 500 otherwise.
func writeErr(w http.ResponseWriter, err error) {
	status, hint := http.StatusInternalServerError, ""
	var ae *AskError
	var de *DecidedError
	switch {
	case errors.As(err, &ae):
		status, hint = http.StatusBadRequest, ae.Hint
	case errors.Is(err, ErrNotFound):
		status = http.StatusNotFound
	case errors.As(err, &de), errors.Is(err, ErrDigest), errors.Is(err, ErrChanged):
		status = http.StatusConflict
	case errors.Is(err, ErrClosed):
		status = http.StatusGone
	}
	writeJSON(w, status, apiError{Error: err.Error(), Hint: hint})
}

// readJSON decodes r's body into v: one JSON value, no unknown fields,
// at most MaxBody bytes (an empty body leaves v as it is). Anything else
// is an *AskError (400).
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return &AskError{"request body: " + err.Error(), "send JSON, at most 64 KiB"}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &AskError{"request body: more than one JSON value", "send one JSON object, at most 64 KiB"}
	}
	return nil
}

// askResponse is POST /v1/requests' answer: the request, and where to
// wait for it.
type askResponse struct {
	Request
	WaitURL string `json:"wait_url,omitempty"`
}

// SandboxHandler is the workload's consent API (docs/consent.md):
//
//	POST /v1/requests            {kind, target, access, reason} → 202 pending (wait_url),
//	                             200 answered at once, 403 refused/denied, 429 rate limited
//	GET  /v1/requests/{id}       the request
//	GET  /v1/requests/{id}/wait?timeout=SECONDS (default 60, at most 300)
//	GET  /v1/grants              this sandbox's grants, desired against effective
//
// peer names the requester from the kernel (never from the request).
func SandboxHandler(b *Broker, peer func(*http.Request) Requester) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/requests", func(w http.ResponseWriter, r *http.Request) {
		var a Ask
		if err := readJSON(w, r, &a); err != nil {
			writeErr(w, err)
			return
		}
		req, err := b.Ask(r.Context(), a, peer(r))
		if err != nil {
			writeErr(w, err)
			return
		}
		status := http.StatusOK
		resp := askResponse{Request: req}
		switch req.State {
		case StatePending:
			status, resp.WaitURL = http.StatusAccepted, "/v1/requests/"+req.ID+"/wait?timeout=60"
		case StateRefused, StateDenied, StateExpired, StateFailed:
			status = http.StatusForbidden
		case StateRateLimited:
			status = http.StatusTooManyRequests
		}
		writeJSON(w, status, resp)
	})
	mux.HandleFunc("GET /v1/requests/{id}", func(w http.ResponseWriter, r *http.Request) {
		req, ok := b.Get(r.PathValue("id"))
		if !ok {
			writeErr(w, ErrNotFound)
			return
		}
		writeJSON(w, http.StatusOK, req)
	})
	mux.HandleFunc("GET /v1/requests/{id}/wait", func(w http.ResponseWriter, r *http.Request) {
		d := DefaultWait
		if s := r.URL.Query().Get("timeout"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeErr(w, &AskError{"timeout " + strconv.Quote(s) + ": want whole seconds", "e.g. ?timeout=60 (at most 300)"})
				return
			}
			d = time.Duration(min(n, int(MaxWait/time.Second))) * time.Second
		}
		req, err := b.Wait(r.Context(), r.PathValue("id"), d)
		if err != nil && !errors.Is(err, context.Canceled) {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, req)
	})
	mux.HandleFunc("GET /v1/grants", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"grants": b.Grants(r.Context())})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{Error: r.Method + " " + r.URL.Path + ": no such call",
			Hint: `POST /v1/requests {"kind":"folder","target":"/path","access":"ro","reason":"..."}, then GET /v1/requests/ID/wait`})
	})
	return mux
}

// Hub is the brokers of a front end's sandboxes (a gateway has many; a
// corral run or a service one at a time), for the approvers' API. A
// Watch on the hub watches every broker, those added later too.
type Hub struct {
	mu      sync.Mutex
	brokers map[string]*Broker
	watches map[int]*hubWatch
	next    int
}

type hubWatch struct {
	out     chan Event
	cancels map[*Broker]func()
	done    chan struct{}
	mu      sync.Mutex
	dropped int // events missed since the last one delivered (out was full)
}

// NewHub is an empty hub.
func NewHub() *Hub { return &Hub{brokers: map[string]*Broker{}, watches: map[int]*hubWatch{}} }

// Add puts b (by its sandbox id, replacing one of the same id) on the hub.
func (h *Hub) Add(b *Broker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.brokers[b.Sandbox()]; old != nil && old != b {
		h.unwatch(old)
	}
	h.brokers[b.Sandbox()] = b
	for _, w := range h.watches {
		if w.cancels[b] == nil {
			w.cancels[b] = forward(b, w)
		}
	}
}

// Remove takes sandbox id's broker off the hub.
func (h *Hub) Remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.brokers[id]; b != nil {
		h.unwatch(b)
		delete(h.brokers, id)
	}
}

func (h *Hub) unwatch(b *Broker) {
	for _, w := range h.watches {
		if c := w.cancels[b]; c != nil {
			c()
			delete(w.cancels, b)
		}
	}
}

// Get is sandbox id's broker.
func (h *Hub) Get(id string) *Broker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.brokers[id]
}

// All are the hub's brokers, by sandbox id.
func (h *Hub) All() []*Broker {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Broker, 0, len(h.brokers))
	for _, b := range h.brokers {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *Broker) int { return cmpString(a.Sandbox(), b.Sandbox()) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// forward registers w as an approver of b, copying b's events to w.out
// until the watch ends or the returned cancel is called (b removed from
// the hub: its copier ends with it).
func forward(b *Broker, w *hubWatch) func() {
	ch, cancel := b.Watch()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-w.done:
				return
			case <-stop:
				return
			case e, ok := <-ch:
				if !ok {
					return
				}
				// A slow reader misses events (the broker never waits)
				// and is told how many with the next one it gets.
				w.mu.Lock()
				e.Dropped += w.dropped
				select {
				case w.out <- e:
					w.dropped = 0
				default:
					w.dropped = e.Dropped + 1
				}
				w.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); close(stop) }) }
}

// Watch registers an approver on every broker of the hub, now and later.
func (h *Hub) Watch() (<-chan Event, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &hubWatch{out: make(chan Event, watchBuffer), cancels: map[*Broker]func(){}, done: make(chan struct{})}
	for _, b := range h.brokers {
		w.cancels[b] = forward(b, w)
	}
	id := h.next
	h.next++
	h.watches[id] = w
	var once sync.Once
	return w.out, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, c := range w.cancels {
				c()
			}
			delete(h.watches, id)
			close(w.done)
		})
	}
}

// owner is the broker holding request or grant id.
func (h *Hub) owner(id string, grant bool) *Broker {
	for _, b := range h.All() {
		if grant {
			b.mu.Lock()
			_, ok := b.grants[id]
			b.mu.Unlock()
			if ok {
				return b
			}
		} else if _, ok := b.Get(id); ok {
			return b
		}
	}
	return nil
}

func (h *Hub) pick(sandbox string) []*Broker {
	if sandbox == "" {
		return h.All()
	}
	if b := h.Get(sandbox); b != nil {
		return []*Broker{b}
	}
	return nil
}

// approveBody and denyBody are the approvers' decisions on the wire.
type approveBody struct {
	Scope    Scope           `json:"scope,omitempty"`
	TTL      policy.Duration `json:"ttl,omitempty"`
	Digest   string          `json:"digest"`
	ReadOnly bool            `json:"read_only,omitempty"`
}

type denyBody struct {
	Reason     string `json:"reason,omitempty"`
	ForSession bool   `json:"for_session,omitempty"`
	Digest     string `json:"digest"`
}

// ApproverHandler is the approvers' consent API over the hub's brokers
// (the front end authenticates; who names the approver for the record):
//
//	GET  /v1/approvals?sandbox=ID&state=pending   {"requests": [...]}, newest first
//	GET  /v1/approvals/{id}
//	POST /v1/approvals/{id}/approve  {scope, ttl, digest, read_only}
//	POST /v1/approvals/{id}/deny     {reason, for_session, digest}
//	GET  /v1/grants?sandbox=ID       {"grants": [...]}
//	POST /v1/grants/{id}/revoke      {kill}
//	GET  /v1/approvals/watch         Server-Sent Events "consent" (Event JSON); connected = an approver
func ApproverHandler(h *Hub, who func(*http.Request) string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/approvals", func(w http.ResponseWriter, r *http.Request) {
		state := State(r.URL.Query().Get("state"))
		out := []Request{}
		for _, b := range h.pick(r.URL.Query().Get("sandbox")) {
			for _, q := range b.Requests() {
				if state == "" || q.State == state {
					out = append(out, q)
				}
			}
		}
		slices.SortStableFunc(out, func(a, b Request) int { return b.Created.Compare(a.Created) })
		writeJSON(w, http.StatusOK, map[string]any{"requests": out})
	})
	mux.HandleFunc("GET /v1/approvals/watch", func(w http.ResponseWriter, r *http.Request) {
		fl, ok := w.(http.Flusher)
		if !ok {
			writeErr(w, errors.New("streaming unsupported"))
			return
		}
		events, cancel := h.Watch()
		defer cancel()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": connected as an approver\n\n")
		fl.Flush()
		beat := time.NewTicker(15 * time.Second)
		defer beat.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-beat.C:
				fmt.Fprint(w, ": heartbeat\n\n")
			case e := <-events:
				b, _ := json.Marshal(e)
				fmt.Fprintf(w, "event: consent\ndata: %s\n\n", b)
			}
			fl.Flush()
		}
	})
	mux.HandleFunc("GET /v1/approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		b := h.owner(r.PathValue("id"), false)
		if b == nil {
			writeErr(w, ErrNotFound)
			return
		}
		q, _ := b.Get(r.PathValue("id"))
		writeJSON(w, http.StatusOK, q)
	})
	mux.HandleFunc("POST /v1/approvals/{id}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		id, verb := r.PathValue("id"), r.PathValue("verb")
		b := h.owner(id, false)
		if b == nil {
			writeErr(w, ErrNotFound)
			return
		}
		var d Decision
		switch verb {
		case "approve":
			var body approveBody
			if err := readJSON(w, r, &body); err != nil {
				writeErr(w, err)
				return
			}
			d = Decision{Approve: true, Scope: body.Scope, TTL: body.TTL, Digest: body.Digest, ReadOnly: body.ReadOnly}
			// A ttl alone is scope ttl; with another scope it would be
			// ignored, and a negative one would make a once approval:
			// neither is what the approver meant.
			switch {
			case d.TTL != 0 && d.Scope == "":
				d.Scope = ScopeTTL
			case d.TTL != 0 && d.Scope != ScopeTTL:
				writeErr(w, &AskError{"ttl " + d.TTL.String() + " with scope " + string(d.Scope) + ": a ttl goes with scope ttl", `send {"ttl":"2h"} alone, or a scope without a ttl`})
				return
			}
		case "deny":
			var body denyBody
			if err := readJSON(w, r, &body); err != nil {
				writeErr(w, err)
				return
			}
			d = Decision{Reason: body.Reason, ForSession: body.ForSession, Digest: body.Digest}
		default:
			writeErr(w, &AskError{"unknown decision " + strconv.Quote(verb), "approve or deny"})
			return
		}
		if d.Digest == "" {
			writeErr(w, &AskError{"digest missing", "send the request's digest as you were shown it (GET /v1/approvals/ID)"})
			return
		}
		d.By = who(r)
		q, err := b.Decide(r.Context(), id, d)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, q)
	})
	mux.HandleFunc("GET /v1/grants", func(w http.ResponseWriter, r *http.Request) {
		out := []Grant{}
		for _, b := range h.pick(r.URL.Query().Get("sandbox")) {
			out = append(out, b.Grants(r.Context())...)
		}
		writeJSON(w, http.StatusOK, map[string]any{"grants": out})
	})
	mux.HandleFunc("POST /v1/grants/{id}/revoke", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Kill bool `json:"kill,omitempty"`
		}
		if err := readJSON(w, r, &body); err != nil {
			writeErr(w, err)
			return
		}
		b := h.owner(r.PathValue("id"), true)
		if b == nil {
			writeErr(w, ErrNotFound)
			return
		}
		g, err := b.Revoke(r.Context(), r.PathValue("id"), who(r), body.Kill)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error(), "grant": g})
			return
		}
		writeJSON(w, http.StatusOK, g)
	})
	return mux
}
