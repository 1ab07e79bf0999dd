//go:build linux

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
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1/gatewayv1connect"
)

// DefaultSocket is where the gateway listens and the CLI connects when
// neither --listen/--gateway nor CORRAL_GATEWAY says otherwise:
// /run/corral/gateway.sock as root, else $XDG_RUNTIME_DIR/corral/gateway.sock,
// else ~/.local/state/corral/gateway.sock.
func DefaultSocket() string {
	if os.Getuid() == 0 {
		return "/run/corral/gateway.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "corral", "gateway.sock")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "corral", "gateway.sock")
}

// DefaultDB is the gateway's database: /var/lib/corral/gateway/gateway.db
// as root, else ~/.local/state/corral/gateway/gateway.db.
func DefaultDB() string {
	if os.Getuid() == 0 {
		return "/var/lib/corral/gateway/gateway.db"
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "corral", "gateway", "gateway.db")
}

// Listen opens the gateway's listener. addr is "unix:PATH" (the socket is
// made 0600 in a 0700 directory; a stale socket is replaced) or "IP:PORT"
// (clients need the bearer token). With tls (a certificate) the TCP
// listener speaks TLS; without, only loopback addresses are accepted.
func Listen(addr string, tlsCfg *tls.Config) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if fi, err := os.Lstat(path); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("%s exists and is not a socket", path)
			}
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
				return nil, fmt.Errorf("%s: another gateway is listening there", path)
			}
			_ = os.Remove(path)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		return l, os.Chmod(path, 0o600)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: want unix:PATH or IP:PORT", addr)
	}
	if tlsCfg != nil {
		return tls.Listen("tcp", addr, tlsCfg)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("--listen %s: off loopback the token would cross the network in clear: give --tls-cert and --tls-key, or use 127.0.0.1 or a unix socket", addr)
	}
	return net.Listen("tcp", addr)
}

type peerKey struct{}

// Handler is the API behind authentication: on a unix socket the peer's
// uid (SO_PEERCRED) must be this process's or root's; on TCP the request
// must carry "Authorization: Bearer TOKEN" with the token (compared in
// constant time). Anything else is 401 or 403 before any handler runs.
func Handler(srv *Server, token string) http.Handler {
	mux := http.NewServeMux()
	// Requests are bounded: a unary exec's stdin travels in one message.
	limit := connect.WithReadMaxBytes(MaxMessage)
	mux.Handle(gatewayv1connect.NewSandboxServiceHandler(srv, limit))
	mux.Handle(gatewayv1connect.NewPolicyServiceHandler(srv, limit))
	mux.Handle(gatewayv1connect.NewCredentialServiceHandler(srv, limit))
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
		if uid, ok := r.Context().Value(peerKey{}).(int); ok {
			if uid != os.Getuid() && uid != 0 {
				refuse(w, r, connect.CodePermissionDenied, fmt.Sprintf("uid %d may not use this gateway (only uid %d and root)", uid, os.Getuid()))
				return
			}
		} else {
			scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || token == "" || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				refuse(w, r, connect.CodeUnauthenticated, "missing or wrong bearer token: pass the gateway's token file with --token-file")
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// MaxMessage bounds one request message (bytes): 16 MiB.
const MaxMessage = 16 << 20

// Serve serves h on l (HTTP/1.1 and cleartext HTTP/2, so gRPC clients
// work too) until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if uc, ok := c.(*net.UnixConn); ok {
				if uid, ok := peerUID(uc); ok {
					return context.WithValue(ctx, peerKey{}, uid)
				}
				return context.WithValue(ctx, peerKey{}, -1)
			}
			return ctx
		}}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true) // over TLS (the listener's)
	srv.Protocols.SetUnencryptedHTTP2(true)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		// Let the calls under way finish (a create, an exec) for a while.
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-drained
	return nil
}

func peerUID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}

// Clients are the API's clients on one connection pool.
type Clients struct {
	gatewayv1connect.SandboxServiceClient
	Policies    gatewayv1connect.PolicyServiceClient
	Credentials gatewayv1connect.CredentialServiceClient
}

// Client connects to a gateway at addr ("unix:PATH", "http://IP:PORT" or
// "https://HOST:PORT", verified against the system roots plus the PEM
// certificates in caFile when given) with token (TCP only; "" for none).
func Client(addr, token, caFile string) (*Clients, error) {
	// Cleartext HTTP/2 (the server speaks it too): streaming both ways
	// (ExecSandboxStream) needs it.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	base := addr
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
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
		return nil, fmt.Errorf("gateway address %q: want unix:PATH, http://IP:PORT or https://HOST:PORT", addr)
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
