//go:build linux || windows

package gateway

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1/gatewayv1connect"
	"github.com/corral-sandbox/corral/internal/peerhttp"
)

// Listen opens the gateway's listener. addr is a local endpoint,
// peerhttp.ListenLocal's "unix:PATH" on Linux (the socket is made 0600 in
// a 0700 directory; a stale socket is replaced) or "pipe:NAME" on Windows
// (owner, SYSTEM and Administrators only), or "IP:PORT" (clients need the
// bearer token). With tls (a certificate) the TCP listener speaks TLS;
// without, only loopback addresses are accepted.
func Listen(addr string, tlsCfg *tls.Config) (net.Listener, error) {
	if peerhttp.IsLocal(addr) {
		return peerhttp.ListenLocal(addr)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: want %s or IP:PORT", addr, peerhttp.LocalForm)
	}
	if tlsCfg != nil {
		return tls.Listen("tcp", addr, tlsCfg)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("--listen %s: off loopback the token would cross the network in clear: give --tls-cert and --tls-key, or use 127.0.0.1 or %s", addr, peerhttp.LocalForm)
	}
	return net.Listen("tcp", addr)
}

// Handler is the API behind authentication (PeerAuth), with the
// approvers' consent API (consent.ApproverHandler on the server's hub)
// beside it, and on TCP the consent web page under /ui/ (consent/web).
func Handler(srv *Server, token string) http.Handler {
	mux := http.NewServeMux()
	// Requests are bounded: a unary exec's stdin travels in one message.
	limit := connect.WithReadMaxBytes(MaxMessage)
	mux.Handle(gatewayv1connect.NewSandboxServiceHandler(srv, limit))
	mux.Handle(gatewayv1connect.NewPolicyServiceHandler(srv, limit))
	mux.Handle(gatewayv1connect.NewCredentialServiceHandler(srv, limit))
	srv.consentRoutes(mux, token)
	authed := PeerAuth(mux, token)
	ui := srv.consentPage(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page does its own authentication (the token once, then a
		// cookie and a CSRF header: a browser cannot send the bearer
		// header on a navigation); it is served on TCP only.
		if _, _, local := peerhttp.LocalPeer(r); !local && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
			ui.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	})
}

// PeerAuth lets a request reach h only when, on a local endpoint (Serve),
// the peer is this process's user or root (peerhttp.LocalPeer: a unix
// socket's SO_PEERCRED uid; a named pipe client's token, or SYSTEM or an
// elevated administrator), or, on TCP, it carries "Authorization: Bearer TOKEN" with token (compared in constant
// time; "" accepts none). Anything else is 401 or 403 before h runs.
func PeerAuth(h http.Handler, token string) http.Handler {
	errs := connect.NewErrorWriter()
	refuse := func(w http.ResponseWriter, r *http.Request, code connect.Code, msg string) {
		if errs.IsSupported(r) { // the client's protocol carries the reason
			_ = errs.Write(w, r, connect.NewError(code, errors.New(msg)))
			return
		}
		status := http.StatusForbidden
		if code == connect.CodeUnauthenticated {
			status = http.StatusUnauthorized
		}
		http.Error(w, msg, status)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if who, allowed, local := peerhttp.LocalPeer(r); local {
			if !allowed {
				refuse(w, r, connect.CodePermissionDenied, fmt.Sprintf("%s may not use this gateway (only its own user and %s)", who, peerhttp.Superuser))
				return
			}
		} else if !BearerOK(r, token) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			refuse(w, r, connect.CodeUnauthenticated, "missing or wrong bearer token: pass the gateway's token file with --token-file")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// BearerOK reports whether r carries "Authorization: Bearer TOKEN" with
// token (constant time; "" accepts none).
func BearerOK(r *http.Request, token string) bool {
	scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer") && token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// MaxMessage bounds one request message (bytes): 16 MiB.
const MaxMessage = 16 << 20

// Serve serves h on l until ctx ends (peerhttp.Serve).
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	return peerhttp.Serve(ctx, l, h)
}

// Clients are the API's clients on one connection pool.
type Clients struct {
	gatewayv1connect.SandboxServiceClient
	Policies    gatewayv1connect.PolicyServiceClient
	Credentials gatewayv1connect.CredentialServiceClient
}

// Client connects to a gateway at addr (peerhttp.LocalForm, "http://IP:PORT" or
// "https://HOST:PORT", verified against the system roots plus the PEM
// certificates in caFile when given) with token (TCP only; "" for none).
func Client(addr, token, caFile string) (*Clients, error) {
	// Cleartext HTTP/2 (the server speaks it too): streaming both ways
	// (ExecSandboxStream) needs it.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	base := addr
	if peerhttp.IsLocal(addr) {
		if err := peerhttp.CheckLocal(addr); err != nil {
			return nil, fmt.Errorf("gateway address: %w", err)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return peerhttp.DialLocal(ctx, addr) }
		base = "http://corral-gateway"
	} else if strings.HasPrefix(addr, "https://") {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, err
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificate in it", caFile)
			}
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		tr.Protocols.SetHTTP2(true)
	} else if rest, ok := strings.CutPrefix(addr, "http://"); ok {
		host := rest
		if h, _, err := net.SplitHostPort(rest); err == nil {
			host = h
		}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); (err != nil || !ip.IsLoopback()) && host != "localhost" {
			return nil, fmt.Errorf("gateway address %q: the token would cross the network in clear; use https:// (or a loopback address)", addr)
		}
	} else {
		return nil, fmt.Errorf("gateway address %q: want %s, http://IP:PORT or https://HOST:PORT", addr, peerhttp.LocalForm)
	}
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(bearer(token)))
	}
	hc := &http.Client{Transport: tr}
	return &Clients{gatewayv1connect.NewSandboxServiceClient(hc, base, opts...), gatewayv1connect.NewPolicyServiceClient(hc, base, opts...),
		gatewayv1connect.NewCredentialServiceClient(hc, base, opts...)}, nil
}

// bearer adds the token to every request, unary and streaming.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
