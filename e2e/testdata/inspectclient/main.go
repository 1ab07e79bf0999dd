// Command inspectclient is the e2e suite's Go client for inspected egress:
// grpc-go and coder/websocket, run inside a sandbox the way an agent's Go
// tool would be — through HTTPS_PROXY (which corral sets) and trusting the
// system roots (SSL_CERT_FILE or the distro bundle, which corral points at
// the sandbox's bundle). It is built statically by the test and granted
// read-only. Each check prints one "name: result" line.
//
//	inspectclient grpc HOST:PORT TOKEN
//	inspectclient ws URL DENIED-URL
//	inspectclient wsauth URL AUTHORIZATION
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: inspectclient grpc HOST:PORT TOKEN | ws URL DENIED-URL | wsauth URL AUTHORIZATION")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch os.Args[1] {
	case "grpc":
		grpcCalls(ctx, os.Args[2], os.Args[3])
	case "ws":
		wsEcho(ctx, os.Args[2], os.Args[3])
	case "wsauth":
		wsAuth(ctx, os.Args[2], os.Args[3])
	default:
		fmt.Fprintf(os.Stderr, "inspectclient: unknown subcommand %q\n", os.Args[1])
		os.Exit(2)
	}
}

// grpcCalls makes the health service's calls against addr: a unary Check
// (its response and trailer), a Check that fails (its status), a
// server-streaming Watch (its messages and final status) and a List.
func grpcCalls(ctx context.Context, addr, tok string) {
	// passthrough: the name goes to the proxy unresolved (the sandbox has
	// no DNS for it; the proxy maps it).
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(nil, "")))
	if err != nil {
		fmt.Println("grpc-dial:", err)
		return
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-e2e-token", tok)

	var hdr, trl metadata.MD
	r, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "ok"}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		fmt.Println("unary:", status.Code(err), status.Convert(err).Message())
	} else {
		fmt.Printf("unary: %s header=%s trailer=%s\n", r.Status, strings.Join(hdr.Get("x-e2e-header"), ","), strings.Join(trl.Get("x-e2e-trailer"), ","))
	}

	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{Service: "missing"})
	fmt.Println("unary-error:", status.Code(err), status.Convert(err).Message())

	st, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "stream"})
	if err != nil {
		fmt.Println("stream:", status.Code(err), status.Convert(err).Message())
	} else {
		var got []string
		for {
			m, err := st.Recv()
			if err != nil {
				if err != io.EOF {
					got = append(got, "end="+status.Code(err).String()+" "+status.Convert(err).Message())
				}
				break
			}
			got = append(got, m.Status.String())
		}
		fmt.Printf("stream: %s trailer=%s\n", strings.Join(got, ","), strings.Join(st.Trailer().Get("x-e2e-trailer"), ","))
	}

	_, err = c.List(ctx, &healthpb.HealthListRequest{})
	fmt.Println("denied:", status.Code(err), status.Convert(err).Message())
}

// wsEcho sends a text message to the WebSocket at u and prints what came
// back, then tries to open denied and prints the refusal.
func wsEcho(ctx context.Context, u, denied string) {
	c, resp, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		fmt.Println("ws:", err)
	} else {
		msg := "corral-ws-" + fmt.Sprint(time.Now().UnixNano())
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			fmt.Println("ws: write:", err)
		} else if typ, b, err := c.Read(ctx); err != nil {
			fmt.Println("ws: read:", err)
		} else {
			fmt.Printf("ws: %d %s %s same=%v\n", resp.StatusCode, typ, b, string(b) == "echo "+msg)
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	_, resp, err = websocket.Dial(ctx, denied, nil)
	switch {
	case err == nil:
		fmt.Println("ws-denied: upgraded")
	case resp == nil:
		fmt.Println("ws-denied: no response:", err)
	default:
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("ws-denied: %d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
	}
}

// wsAuth opens the WebSocket at u with an Authorization header (a
// credential's placeholder, for the proxy to substitute in the
// handshake), sends a text message and prints the echo, or the refusal.
func wsAuth(ctx context.Context, u, auth string) {
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {auth}}})
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			fmt.Printf("wsauth: %d %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			fmt.Println("wsauth: no response:", err)
		}
		return
	}
	defer c.Close(websocket.StatusNormalClosure, "")
	if err := c.Write(ctx, websocket.MessageText, []byte("corral-wsauth")); err != nil {
		fmt.Println("wsauth: write:", err)
	} else if typ, b, err := c.Read(ctx); err != nil {
		fmt.Println("wsauth: read:", err)
	} else {
		fmt.Printf("wsauth: %d %s %s\n", resp.StatusCode, typ, b)
	}
}
