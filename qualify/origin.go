//go:build linux

package qualify

// An HTTPS origin for the inspected-egress cases (P29, P32) and for
// `corral doctor --egress`: an Upstream that offers h2 as well as
// http/1.1, with a Server-Sent Events stream and a WebSocket echo.

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/net/websocket"
)

// Origin routes (NewOrigin), besides the Upstream's "/".
const (
	// OriginSSE streams text/event-stream: an event "first", flushed at
	// once, then nothing until the client goes away (or OriginSSEHold
	// passes), then an event "last". A client that reads "first" while
	// the stream is still open got it streamed, not buffered to the end.
	OriginSSE = "/sse"
	// OriginWS is a WebSocket echo (RFC 6455 over HTTP/1.1): each message
	// is sent back as it came.
	OriginWS = "/ws"
)

// OriginSSEHold bounds how long the SSE stream stays open after its
// first event.
const OriginSSEHold = 30 * time.Second

// NewOrigin starts an HTTPS Upstream on ip:port (0: any port) with cert,
// offering h2 and http/1.1 (ALPN), that serves OriginSSE and OriginWS
// too. Close it when done.
func NewOrigin(ip string, port int, cert *tls.Certificate) (*Upstream, error) {
	u, err := startUpstream(ip, port, cert, []string{"h2", "http/1.1"})
	if err != nil {
		return nil, err
	}
	u.Mux.HandleFunc(OriginSSE, originSSE)
	// Any Origin header, or none: the clients here are not browsers.
	u.Mux.Handle(OriginWS, websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil },
		Handler: func(c *websocket.Conn) {
			defer c.Close()
			for {
				var f wsFrame
				if err := wsEcho.Receive(c, &f); err != nil || wsEcho.Send(c, f) != nil {
					return
				}
			}
		},
	})
	return u, nil
}

// originSSE serves OriginSSE.
func originSSE(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fmt.Fprint(w, "data: first\n\n")
	_ = http.NewResponseController(w).Flush()
	select {
	case <-r.Context().Done():
		return
	case <-time.After(OriginSSEHold):
	}
	fmt.Fprint(w, "data: last\n\n")
}

// wsFrame is one WebSocket message and its frame type (text or binary),
// so that the echo keeps the type.
type wsFrame struct {
	data []byte
	typ  byte
}

var wsEcho = websocket.Codec{
	Marshal: func(v any) ([]byte, byte, error) {
		f := v.(wsFrame)
		return f.data, f.typ, nil
	},
	Unmarshal: func(data []byte, typ byte, v any) error {
		*v.(*wsFrame) = wsFrame{data: data, typ: typ}
		return nil
	},
}
