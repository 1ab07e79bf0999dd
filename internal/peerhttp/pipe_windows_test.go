package peerhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

func pipeName(t *testing.T) string {
	return fmt.Sprintf("corral-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
}

// whoami answers with the request's PeerSID.
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	sid, ok := PeerSID(r)
	fmt.Fprintf(w, "%s %v", sid, ok)
})

// servePipe serves h on a new pipe until the test ends.
func servePipe(t *testing.T, h http.Handler) string {
	t.Helper()
	name := pipeName(t)
	l, err := ListenPipe(name)
	if err != nil {
		t.Fatal(err)
	}
	wineFirstInstance(t, name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return name
}

// wineFirstInstance takes, under Wine, the listener's first pipe instance,
// which go-winio makes without read or write access so that Windows keeps
// it disconnected while later instances serve; Wine puts it in the
// listening state, where it takes the first client and never answers.
func wineFirstInstance(t *testing.T, name string) {
	t.Helper()
	if !wine.Detected() {
		return
	}
	path, _ := PipePath(name)
	c, err := winio.DialPipeAccessImpLevel(context.Background(), path, windows.GENERIC_READ|windows.GENERIC_WRITE, winio.PipeImpLevelIdentification)
	if err != nil {
		t.Fatalf("taking the first instance under Wine: %v", err)
	}
	t.Cleanup(func() { c.Close() })
}

// pipeClient speaks cleartext HTTP/2 (what the gateway's clients speak)
// over conns from dial.
func pipeClient(dial func(ctx context.Context) (net.Conn, error)) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A request over the pipe reaches the handler with the caller's user SID,
// over HTTP/2; a TCP client, which has none, is refused.
func TestPipeOwnerOnly(t *testing.T) {
	h := OwnerOnlySID(whoami)
	name := servePipe(t, h)
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	c := pipeClient(func(ctx context.Context) (net.Conn, error) { return DialPipe(ctx, name) })
	for i := range 2 { // the second on the same connection: identified once
		code, body := get(t, c, "http://corral/")
		if code != 200 || body != me+" true" {
			t.Fatalf("request %d over the pipe: %d %q, want 200 %q", i, code, body, me+" true")
		}
	}

	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, tl, h)
	if code, body := get(t, http.DefaultClient, "http://"+tl.Addr().String()+"/"); code != http.StatusForbidden {
		t.Fatalf("tcp client: %d %q, want 403", code, body)
	}
}

// The rule behind OwnerOnlySID for clients this test cannot be: another
// user is refused, SYSTEM and an elevated administrator are let in, and an
// unidentified client is refused.
func TestAllowedPipePeer(t *testing.T) {
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sid   string
		admin bool
		want  int
	}{{me, false, 200}, {"S-1-5-21-1-2-3-1001", false, 403}, {"S-1-5-21-1-2-3-1001", true, 200}, {sidSystem, false, 200}, {"", true, 403}} {
		p := &pipePeer{sid: c.sid, admin: c.admin}
		p.once.Do(func() {})
		r, _ := http.NewRequestWithContext(context.WithValue(context.Background(), peerKey{}, p), "GET", "/", nil)
		w := httptest.NewRecorder()
		OwnerOnlySID(whoami).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("sid %q admin %v: %d, want %d", c.sid, c.admin, w.Code, c.want)
		}
	}
}

// A client that lets the server impersonate it only anonymously (go-winio's
// default dial) cannot be identified, and is refused.
func TestPipeAnonymousClientRefused(t *testing.T) {
	name := servePipe(t, OwnerOnlySID(whoami))
	path, _ := PipePath(name)
	c := pipeClient(func(ctx context.Context) (net.Conn, error) { return winio.DialPipeContext(ctx, path) })
	code, body := get(t, c, "http://corral/")
	if code == 200 && wine.Detected() {
		wine.SkipArtifact(t, "the named pipe server sees the client's full token whatever impersonation level the client allowed (SECURITY_ANONYMOUS is ignored)")
	}
	if code != http.StatusForbidden || !strings.Contains(body, "an unidentified client") {
		t.Fatalf("anonymous client: %d %q, want 403 as an unidentified client", code, body)
	}
}

// The name is never shared: a second ListenPipe on a live name fails, and
// so does one on a name another server made first (a squatter); once the
// first listener is closed the name is free again.
func TestListenPipeSquatted(t *testing.T) {
	name := pipeName(t)
	path, _ := PipePath(name)
	l, err := ListenPipe(name)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := ListenPipe(name); err == nil {
		l2.Close()
		wine.SkipArtifact(t, "NtCreateNamedPipeFile with FILE_CREATE (what FILE_FLAG_FIRST_PIPE_INSTANCE asks) adds an instance to a pipe that exists instead of failing")
		t.Fatal("a second ListenPipe on a live name succeeded")
	}
	l.Close()
	// A squatter's pipe, open to everyone, as go-winio makes one by default.
	sq, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: "D:(A;;GA;;;WD)"})
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := ListenPipe(name); err == nil {
		l2.Close()
		t.Fatal("ListenPipe on a squatted name succeeded")
	} else if !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("squatted name: %v, want the pipe exists already", err)
	}
	sq.Close()
	l, err = ListenPipe(name)
	if err != nil {
		t.Fatalf("the name once free: %v", err)
	}
	l.Close()
}

// DialPipe refuses a pipe owned by another SID (a squatter's) before
// writing to it.
func TestDialPipeForeignOwner(t *testing.T) {
	name := pipeName(t)
	path, _ := PipePath(name)
	// Owned by Everyone: only a process that may name another owner
	// (SeRestorePrivilege) can make it.
	sq, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: "O:WDD:(A;;GA;;;WD)"})
	if errors.Is(err, windows.ERROR_INVALID_OWNER) {
		t.Skip("this process may not make a pipe with another owner (ERROR_INVALID_OWNER); TestPipeSecurityDescriptor checks the owner is read back")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	go func() {
		if c, err := sq.Accept(); err == nil {
			c.Close()
		}
	}()
	if c, err := DialPipe(context.Background(), name); err == nil {
		c.Close()
		t.Fatal("DialPipe accepted a pipe owned by Everyone")
	} else if !strings.Contains(err.Error(), "is owned by S-1-1-0") {
		t.Fatalf("DialPipe: %v, want owned by S-1-1-0 (Everyone)", err)
	}
}

// The pipe's security descriptor, read back from a client's handle: owned
// by this user, a protected DACL that grants all access to this user,
// SYSTEM and Administrators, and nothing else.
func TestPipeSecurityDescriptor(t *testing.T) {
	name := servePipe(t, whoami)
	c, err := DialPipe(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, _ := handleOf(c)
	sd, err := windows.GetSecurityInfo(h, windows.SE_KERNEL_OBJECT, windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := self()
	if o, _, err := sd.Owner(); err != nil || o.String() != me {
		t.Fatalf("owner %v (%v), want %s", o, err, me)
	}
	ctl, _, err := sd.Control()
	if err != nil {
		t.Fatal(err)
	}
	if ctl&windows.SE_DACL_PROTECTED == 0 {
		t.Errorf("the DACL is not protected (control %#x)", ctl)
	}
	dacl, _, err := sd.DACL()
	if err != nil || dacl == nil {
		t.Fatalf("DACL %v (%v): a null DACL grants everyone everything", dacl, err)
	}
	var got []string
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			t.Fatal(err)
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart)).String()
		if ace.Header.AceType != windows.ACCESS_ALLOWED_ACE_TYPE {
			t.Errorf("ACE %d for %s: type %d, want allow", i, sid, ace.Header.AceType)
		}
		// GENERIC_ALL, mapped by the pipe to FILE_ALL_ACCESS.
		if ace.Mask != windows.GENERIC_ALL && ace.Mask&0x1f01ff != 0x1f01ff {
			t.Errorf("ACE %d for %s: mask %#x, want all access", i, sid, ace.Mask)
		}
		got = append(got, sid)
	}
	sort.Strings(got)
	want := []string{me, sidSystem, sidAdmins}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the DACL grants %v, want %v", got, want)
	}
}

func TestPipePath(t *testing.T) {
	for _, bad := range []string{"", `a\b`, strings.Repeat("x", 256-len(PipePrefix)+1)} {
		if _, err := PipePath(bad); err == nil {
			t.Errorf("PipePath(%q) accepted", bad)
		}
	}
	if p, err := PipePath("corral-gateway"); err != nil || p != `\\.\pipe\corral-gateway` {
		t.Fatalf("PipePath: %q %v", p, err)
	}
}
