package egress

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestNetHTTPClient drives the proxy with the standard library client: HTTPS
// through CONNECT (certificate verified for the name) and plain HTTP with
// HEAD, 204 and 304 responses on one keep-alive connection.
func TestNetHTTPClient(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.WriteHeader(304)
		default:
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}
	})
	tlsUp := startUpstream(t, "127.0.0.2", h, "api.allowed.test")
	up := startUpstream(t, "127.0.0.2", h)
	tp := startProxy(t, Config{Policy: basicPolicy(tlsUp.port, up.port)})
	tr := &http.Transport{
		Proxy:           http.ProxyURL(mustURL("http://" + tp.addr)),
		TLSClientConfig: &tls.Config{RootCAs: certPool(selfSigned(t, "api.allowed.test"))},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := 0; i < 2; i++ {
		resp, err := c.Get("https://api.allowed.test:" + itoa(tlsUp.port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello" {
			t.Fatalf("https body %q", b)
		}
	}
	base := "http://api.allowed.test:" + itoa(up.port)
	for _, tc := range []struct {
		method, path string
		status       int
		cl           int64
	}{{"HEAD", "/", 200, 5}, {"GET", "/204", 204, 0}, {"GET", "/304", 304, 0}, {"GET", "/", 200, 5}} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.status == 200 && resp.ContentLength != tc.cl) {
			t.Fatalf("%s %s: %d len %d", tc.method, tc.path, resp.StatusCode, resp.ContentLength)
		}
	}
	if up.accepts.Load() != 1 {
		t.Fatalf("plain upstream saw %d connections, want 1 (keep-alive)", up.accepts.Load())
	}
}
