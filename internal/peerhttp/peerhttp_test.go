//go:build linux

package peerhttp

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// OwnerOnly lets a unix peer of this uid in and refuses a TCP client,
// which carries no uid; the socket is 0600.
func TestOwnerOnly(t *testing.T) {
	h := OwnerOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	path := filepath.Join(t.TempDir(), "shared", "d", "s.sock")
	ul, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	// The socket's own directory is private; one made above it is not
	// (it is shared: /run/corral).
	for d, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, filepath.Dir(filepath.Dir(path)): 0o711} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: mode %v %v, want %v", d, fi.Mode(), err, want)
		}
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, ul, h)
	go Serve(ctx, tl, h)
	uc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", path)
	}}}
	resp, err := uc.Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("unix peer of our uid: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + tl.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tcp client: %d, want 403", resp.StatusCode)
	}
	if Allowed(os.Getuid()+1) && os.Getuid() != 0 {
		t.Fatal("another uid allowed")
	}
	if os.Getuid() == 0 && Allowed(1001) {
		t.Fatal("uid 1001 allowed for root's socket")
	}
	if _, err := ListenUnix(path); err == nil {
		t.Fatal("a second server on a live socket")
	}
}
