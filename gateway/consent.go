//go:build linux

package gateway

import (
	"fmt"
	"net/http"

	"github.com/corral-sandbox/corral/consent"
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

// approver names who made a decision for the record: the peer's uid on a
// unix socket, the token's holder on TCP.
func approver(r *http.Request) string {
	if uid, ok := PeerUID(r); ok {
		return fmt.Sprintf("uid %d", uid)
	}
	return "token"
}
