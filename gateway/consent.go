//go:build linux || windows

package gateway

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/consent/web"
	"github.com/corral-sandbox/corral/internal/peerhttp"
	"github.com/corral-sandbox/corral/provider"
)

// putLive holds h as sandbox id's live session (under s.mu), its consent
// broker on the approvers' hub.
func (s *Server) putLive(id string, h *held) {
	s.live[id] = h
	if b := h.sess.Consent(); b != nil {
		s.hub.Add(b)
	} else {
		s.hub.Remove(id)
	}
}

// dropLive forgets sandbox id's live session (under s.mu).
func (s *Server) dropLive(id string) {
	delete(s.live, id)
	s.hub.Remove(id)
}

// Hub is the consent brokers of the sandboxes this gateway holds.
func (s *Server) Hub() *consent.Hub { return s.hub }

// consentRoutes serves the approvers' consent API on mux (behind the
// gateway's auth: PeerAuth).
func (s *Server) consentRoutes(mux *http.ServeMux, token string) {
	api := consent.ApproverHandler(s.hub, approver)
	mux.Handle("/v1/approvals", api)
	mux.Handle("/v1/approvals/", api)
	mux.Handle("/v1/grants", api)
	mux.Handle("/v1/grants/", api)
}

// approver names who made a decision for the record: the peer on a local
// endpoint ("uid 1000", a SID), the token's holder on TCP.
func approver(r *http.Request) string {
	if who, _, ok := peerhttp.LocalPeer(r); ok {
		return who
	}
	return "token"
}

// consentPage is the consent web page over the gateway's sandboxes
// (docs/consent.md, "The web page"); token "" refuses every request.
func (s *Server) consentPage(token string) http.Handler {
	api := consent.ApproverHandler(s.hub, func(*http.Request) string { return "web page (token)" })
	return web.Handler(pageSource{s}, api, token)
}

// pageSource is the page's view of the gateway's sandboxes.
type pageSource struct{ s *Server }

func (p pageSource) Sandboxes(ctx context.Context) ([]web.Sandbox, error) {
	recs, err := p.s.cfg.Store.List()
	if err != nil {
		return nil, err
	}
	out := make([]web.Sandbox, 0, len(recs))
	for _, r := range recs {
		var layers []provider.LayerStatus
		_ = json.Unmarshal([]byte(r.Layers), &layers)
		out = append(out, web.Sandbox{ID: r.ID, Name: r.Name, Provider: r.Provider, State: p.s.withEffective(ctx, toProto(r)).Effective, Layers: layers})
	}
	return out, nil
}

func (p pageSource) AuditTail(_ context.Context, id string, n int) ([]string, error) {
	return web.TailFile(p.s.auditPath(id), n)
}
