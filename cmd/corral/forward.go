//go:build linux || windows

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/store"
)

// forwardCmd is `corral sandbox forward ID [HOST:]LOCAL:REMOTE`.
func forwardCmd(f *gatewayFlags) *cobra.Command {
	return &cobra.Command{Use: "forward ID [HOST:]LOCAL:REMOTE", Short: "Forward a loopback port here to a port on a sandbox's own loopback",
		Long: `Listen on HOST:LOCAL (HOST a loopback address, default 127.0.0.1; LOCAL 0
picks a free port) and carry each connection accepted there, through the
gateway, to port REMOTE on the sandbox's own loopback, where a server the
workload started listens. The address listened on is printed on stdout.

A connection to a port nobody listens on is reset (the reason is printed on
stderr) and the forward goes on. The forward ends, with its connections, when
the sandbox stops or is deleted (exit 121 or 118) and at SIGINT or SIGTERM
(exit 0). A sandbox that is not ready, or whose provider cannot reach its
loopback (mxc isolation_session), is refused before anything listens, 121. Every forwarded connection is a Network Activity event in the
sandbox's audit log (corral sandbox audit).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			listen, remote, err := parseForward(args[1])
			if err != nil {
				return err
			}
			cl, err := f.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			get, err := cl.GetSandbox(ctx, connect.NewRequest(&gw.GetSandboxRequest{Id: args[0]}))
			if err != nil {
				return apiErr(err)
			}
			sb := get.Msg.Sandbox
			if sb.Phase != store.PhaseReady {
				return &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("gateway: sandbox %s is %s, not ready: start it first (corral sandbox start %s)", sb.Id, sb.Phase, sb.Id)}
			}
			if !sb.PortForwarding {
				return &provider.Error{Code: provider.CodeUnavailable, Msg: fmt.Sprintf("gateway: sandbox %s: its provider %s cannot reach the sandbox's loopback (no port forwarding; effective: %s)", sb.Id, sb.Provider, sb.Effective)}
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("forward: %w", err)
			}
			fw := &forwarder{cl: cl, id: sb.Id, port: uint32(remote)}
			fmt.Println(l.Addr().String())
			fmt.Fprintf(os.Stderr, "corral: forwarding %s to port %d of sandbox %s (Ctrl-C ends)\n", l.Addr(), remote, sb.Id)
			return fw.serve(ctx, l)
		}}
}

// parseForward parses [HOST:]LOCAL:REMOTE (HOST an IP, bracketed for
// IPv6, or localhost) into the address to listen on and the remote port.
// A HOST off loopback is refused: whoever reaches the listener reaches the
// sandbox's port, with no token asked.
func parseForward(spec string) (listen string, remote int, err error) {
	bad := func(format string, a ...any) (string, int, error) {
		return "", 0, fmt.Errorf("forward %q: "+format+" (want [HOST:]LOCAL:REMOTE, e.g. 8080:80 or 127.0.0.1:0:80)", append([]any{spec}, a...)...)
	}
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return bad("no REMOTE port")
	}
	rest, rport := spec[:i], spec[i+1:]
	host, lport := "127.0.0.1", rest
	if j := strings.LastIndexByte(rest, ':'); j >= 0 {
		host, lport = rest[:j], rest[j+1:]
		if host == "localhost" {
			host = "127.0.0.1"
		}
		ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil {
			return bad("HOST %q is not an IP address", host)
		}
		if !ip.IsLoopback() {
			return bad("HOST %s is not a loopback address: anyone who could reach the listener would reach the sandbox's port; forward to loopback only", ip)
		}
		host = ip.String()
	}
	local, err := strconv.Atoi(lport)
	if err != nil || local < 0 || local > 65535 {
		return bad("LOCAL %q: want a port, 0 to 65535 (0: any free one)", lport)
	}
	remote, err = strconv.Atoi(rport)
	if err != nil || remote < 1 || remote > 65535 {
		return bad("REMOTE %q: want a port, 1 to 65535", rport)
	}
	return net.JoinHostPort(host, strconv.Itoa(local)), remote, nil
}

// forwarder carries the connections of one forward.
type forwarder struct {
	cl   clientT
	id   string
	port uint32
}

// serve accepts on l until ctx ends (exit 0) or the sandbox leaves ready
// (its error); each connection is carried by one ForwardSandbox call.
func (fw *forwarder) serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go fw.watch(ctx, cancel)
	go func() { <-ctx.Done(); l.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
					return cause
				}
				return nil
			}
			return fmt.Errorf("forward: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fw.carry(ctx, c); err != nil {
				switch connect.CodeOf(err) { // no more connections can be carried
				case connect.CodeNotFound:
					cancel(apiErr(err))
				case connect.CodeFailedPrecondition: // not ready, or a provider that cannot forward: not the policy's fault
					cancel(&provider.Error{Code: provider.CodeUnavailable, Msg: "gateway: " + err.(*connect.Error).Message()})
				}
			}
		}()
	}
}

// watch ends the forward (cancel) when the sandbox leaves ready or is
// deleted. A broken watch (the gateway restarting) is opened again.
func (fw *forwarder) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	for ctx.Err() == nil {
		st, err := fw.cl.WatchSandbox(ctx, connect.NewRequest(&gw.WatchSandboxRequest{Id: fw.id}))
		if err == nil {
			for st.Receive() {
				if sb := st.Msg().Sandbox; sb != nil && sb.Phase != store.PhaseReady {
					code := provider.CodeUnavailable
					if sb.Phase == store.PhaseDeleting {
						code = provider.CodeNotFound // as documented: 118 when it is deleted
					}
					cancel(&provider.Error{Code: code, Msg: fmt.Sprintf("gateway: sandbox %s is %s: the forward ends", fw.id, sb.Phase)})
					return
				}
			}
			err = st.Err()
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil || connect.CodeOf(err) == connect.CodeNotFound:
			cancel(&provider.Error{Code: provider.CodeNotFound, Msg: fmt.Sprintf("gateway: sandbox %s was deleted: the forward ends", fw.id)})
			return
		}
		select { // the gateway is away: again in a while
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// carry carries c to the sandbox's port until both sides finish; a
// connection the gateway could not make, or that broke, is reset so that
// c's client sees an error, not a clean end.
func (fw *forwarder) carry(ctx context.Context, c net.Conn) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() {
		if err != nil { // said before the client sees the reset
			fmt.Fprintf(os.Stderr, "corral: forward: connection from %s: %v\n", c.RemoteAddr(), err)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST
			}
		}
		c.Close()
	}()
	stream := fw.cl.ForwardSandbox(ctx)
	if err := stream.Send(&gw.ForwardRequest{Input: &gw.ForwardRequest_Start{Start: &gw.ForwardStart{Id: fw.id, Port: fw.port, Peer: c.RemoteAddr().String()}}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	if !first.GetConnected() {
		return errors.New("the gateway did not say connected first")
	}
	up := make(chan error, 1)
	go func() { // c's bytes to the sandbox, then the half-close
		buf := make([]byte, 32<<10)
		for {
			n, rerr := c.Read(buf)
			if n > 0 {
				if err := stream.Send(&gw.ForwardRequest{Input: &gw.ForwardRequest_Data{Data: append([]byte(nil), buf[:n]...)}}); err != nil {
					up <- nil // the stream broke: Receive says why
					return
				}
			}
			if rerr != nil {
				up <- stream.CloseRequest()
				return
			}
		}
	}()
	for {
		msg, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch o := msg.Output.(type) {
		case *gw.ForwardResponse_Data:
			if _, err := c.Write(o.Data); err != nil {
				return nil // c's client went away; the call ends with ctx
			}
		case *gw.ForwardResponse_Eof:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}
	}
	select {
	case <-up:
	case <-ctx.Done():
	}
	return stream.CloseResponse()
}
