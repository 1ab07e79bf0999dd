package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVersionRefused: a relay of another protocol version is refused with
// both versions named, and the host closes the channel.
func TestVersionRefused(t *testing.T) {
	f, open := newFake(t, `{"t":"hello","v":2,"pid":9}`)
	c, err := open()
	if err == nil || c != nil {
		t.Fatalf("Open of a version 2 relay: %v, %v", c, err)
	}
	mustContain(t, "error", err.Error(), "version 2", "version 1")
	if err := <-f.ended; err != io.EOF {
		t.Fatalf("the host's side of the channel after a refusal: %v, want closed", err)
	}
}

// TestNotHello: a relay whose first frame is not hello, or that sends a
// line longer than MaxFrame, is refused.
func TestNotHello(t *testing.T) {
	for name, first := range map[string]string{
		"ready":    `{"t":"ready","id":"main"}`,
		"too long": `{"t":"hello","v":1,"pid":1,"error":"` + strings.Repeat("x", MaxFrame) + `"}`,
		"not json": `hello`,
	} {
		_, open := newFake(t, first)
		if _, err := open(); err == nil {
			t.Errorf("%s: Open succeeded", name)
		} else if pe := (*ProtocolError)(nil); !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a ProtocolError", name, err)
		}
	}
}

// TestUnknownFrameEndsHost: an unknown frame type from the relay ends the
// channel with a ProtocolError.
func TestUnknownFrameEndsHost(t *testing.T) {
	f, open := newFake(t, `{"t":"hello","v":1,"pid":9}`)
	c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	f.send(`{"t":"surprise"}`)
	<-c.Done()
	var pe *ProtocolError
	if !errors.As(c.Err(), &pe) {
		t.Fatalf("Err %v, want a ProtocolError", c.Err())
	}
}

// TestWindowOverrun: a relay sending more output than the window allows
// without acks ends the channel: the host buffers at most Window per stream.
func TestWindowOverrun(t *testing.T) {
	f, c, p := blockedExec(t)
	chunk := fmt.Sprintf(`{"t":"out","id":%q,"fd":1,"data":%q}`, p.ID(), bytes.Repeat([]byte("QUFB"), MaxChunk/3))
	go func() {
		for range Window/(MaxChunk/4*3) + 2 {
			if _, err := io.WriteString(f.w, chunk+"\n"); err != nil {
				return
			}
		}
	}()
	<-c.Done()
	var pe *ProtocolError
	if !errors.As(c.Err(), &pe) || !strings.Contains(pe.Msg, "window") {
		t.Fatalf("Err %v, want a window overrun", c.Err())
	}
	if _, err := p.Exit(); err == nil {
		t.Fatal("the exec's Exit has no error after the channel ended")
	}
}

// TestEmptyPayloadEndsHost: an out frame with no data ends the channel
// with a ProtocolError: empty frames pass every window, so a relay (or a
// process that could write the channel) would pile them up in the inbox
// of a slow consumer without bound.
func TestEmptyPayloadEndsHost(t *testing.T) {
	f, c, p := blockedExec(t)
	go func() {
		for range 1000 {
			if _, err := fmt.Fprintf(f.w, `{"t":"out","id":%q,"fd":1,"data":""}`+"\n", p.ID()); err != nil {
				return
			}
		}
	}()
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("empty out frames did not end the channel")
	}
	var pe *ProtocolError
	if !errors.As(c.Err(), &pe) || !strings.Contains(pe.Msg, "empty") {
		t.Fatalf("Err %v, want a ProtocolError for the empty frame", c.Err())
	}
}

// blockedExec is a fake relay's host with one exec started whose Stdout
// blocks until the test ends (so its output piles up in the host's inbox).
func blockedExec(t *testing.T) (*fakeRelay, *Client, *Process) {
	t.Helper()
	f, open := newFake(t, `{"t":"hello","v":1,"pid":9}`)
	c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	p, err := c.StartExec(ctxT(t), Command{Args: []string{"x"}, Stdout: blockingWriter(block)})
	if err != nil {
		t.Fatal(err)
	}
	if fr := f.next(); fr.T != tExec {
		t.Fatalf("first frame %q", fr.T)
	}
	return f, c, p
}

type blockingWriter chan struct{}

func (b blockingWriter) Write(p []byte) (int, error) { <-b; return len(p), nil }

// TestHostRefusesFrames: an opened echoing another nonce is refused (the
// DialPort fails, the host closes the id, a fault is recorded) and a frame
// for an unknown id is dropped with a fault; neither ends the channel.
func TestHostRefusesFrames(t *testing.T) {
	f, open := newFake(t, `{"t":"hello","v":1,"pid":9}`)
	c, err := open()
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		conn net.Conn
		err  error
	}
	done := make(chan res, 1)
	go func() { conn, err := c.DialPort(ctxT(t), 80); done <- res{conn, err} }()
	o := f.next()
	if o.T != tOpen || o.Port != 80 || !nonceRE().MatchString(o.Nonce) {
		t.Fatalf("the host's open: %+v", o)
	}
	other := strings.Repeat("0", 32)
	if other == o.Nonce {
		other = strings.Repeat("1", 32)
	}
	f.send(fmt.Sprintf(`{"t":"opened","id":%q,"nonce":%q}`, o.ID, other))
	r := <-done
	if r.err == nil {
		t.Fatal("DialPort accepted an opened with a wrong nonce")
	}
	if cl := f.next(); cl.T != tClose || cl.ID != o.ID {
		t.Fatalf("after the wrong nonce the host sent %+v, want close of %s", cl, o.ID)
	}
	f.send(`{"t":"data","id":"nobody","data":"aGk="}`)
	f.send(`{"t":"exit","id":"e99"}`)
	// A round trip proves the frames above were handled: an exec's exit.
	p, err := c.StartExec(ctxT(t), Command{Args: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	f.next() // exec
	f.next() // eof
	f.send(fmt.Sprintf(`{"t":"exit","id":%q,"code":4}`, p.ID()))
	if e, err := p.Exit(); err != nil || e.Code != 4 {
		t.Fatalf("exit %+v, %v", e, err)
	}
	if c.Err() != nil {
		t.Fatalf("the channel ended: %v", c.Err())
	}
	faults := fmt.Sprint(c.Faults())
	mustContain(t, "faults", faults, "nonce", `unknown connection "nobody"`, `unknown process "e99"`)
}

// TestRelayNonces: the relay refuses an open without a well-formed nonce
// and one reusing a nonce, and serves a fresh one.
func TestRelayNonces(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hi")
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	hr, rw := io.Pipe()
	rr, hw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- Serve(context.Background(), rr, rw) }()
	br := newReader(hr)
	next := func() *frame {
		f, err := readFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if h := next(); h.T != tHello || h.V != Version {
		t.Fatalf("hello %+v", h)
	}
	send := func(s string) { io.WriteString(hw, s+"\n") }
	nonce := strings.Repeat("ab", 16)
	for _, tc := range []struct{ id, nonce, want string }{
		{"c1", "", "nonce"},
		{"c2", "ABABABABABABABABABABABABABABABAB", "nonce"},
		{"c3", nonce[:30], "nonce"},
		{"c4", nonce, ""},
		{"c5", nonce, "already used"},
	} {
		send(fmt.Sprintf(`{"t":"open","id":%q,"port":%d,"nonce":%q}`, tc.id, port, tc.nonce))
		f := next()
		if tc.want == "" {
			if f.T != tOpened || f.ID != tc.id || f.Nonce != tc.nonce {
				t.Fatalf("%s: %+v, want opened echoing the nonce", tc.id, f)
			}
			if d := next(); d.T != tData || string(d.Data) != "hi" {
				t.Fatalf("%s: %+v, want the server's hi", tc.id, d)
			}
			continue
		}
		if f.T != tClosed || f.ID != tc.id || !strings.Contains(f.Error, tc.want) {
			t.Fatalf("%s: %+v, want closed naming %q", tc.id, f, tc.want)
		}
	}
	send(`{"t":"surprise"}`)
	if f := next(); f.T != tError || !strings.Contains(f.Error, "surprise") {
		t.Fatalf("after an unknown type: %+v, want an error frame", f)
	}
	hw.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after EOF: %v", err)
	}
}

// TestExec: stdin in, stdout and stderr out, the exit code; a missing
// command's failure; many at once.
func TestExec(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	var out, errb bytes.Buffer
	cmd := helperCmd("cat", "3")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader("through the relay"), &out, &errb
	code, sig, err := p.c.Exec(ctx, cmd)
	if err != nil || code != 3 || sig != "" {
		t.Fatalf("Exec: %d %q %v", code, sig, err)
	}
	if out.String() != "through the relay" || errb.String() != "to stderr" {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
	if _, _, err := p.c.Exec(ctx, Command{Args: []string{"/nonexistent/tool"}}); err == nil {
		t.Fatal("Exec of a missing command: no error")
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			var out bytes.Buffer
			cmd := helperCmd("cat", strconv.Itoa(i))
			want := strings.Repeat(strconv.Itoa(i), 3*Window) // stdin past the window
			cmd.Stdin, cmd.Stdout = strings.NewReader(want), &out
			code, _, err := p.c.Exec(ctx, cmd)
			if err == nil && (code != i || out.String() != want) {
				err = fmt.Errorf("exec %d: code %d, %d bytes out", i, code, out.Len())
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestFlood: more output than many windows arrives whole and in order.
func TestFlood(t *testing.T) {
	p := newPair(t)
	const n = 8 << 20
	var out bytes.Buffer
	cmd := helperCmd("flood", strconv.Itoa(n))
	cmd.Stdout = &out
	if code, _, err := p.c.Exec(ctxT(t), cmd); err != nil || code != 0 {
		t.Fatalf("Exec: %d %v", code, err)
	}
	if out.Len() != n {
		t.Fatalf("%d bytes, want %d", out.Len(), n)
	}
	for i, b := range out.Bytes() {
		if b != byte(i%251) {
			t.Fatalf("byte %d is %d", i, b)
		}
	}
}

// TestStartAndForward: the main command's port is waited for, then an
// HTTP request goes to it through DialPort.
func TestStartAndForward(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	port := freePort(t)
	var out bytes.Buffer
	cmd := helperCmd("http", strconv.Itoa(port))
	cmd.WaitPort, cmd.Stdout = port, &out
	main, err := p.c.Start(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if p.c.Main() != main || main.ID() != MainID {
		t.Fatal("Main is not the started process")
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return p.c.DialPort(ctx, port)
	}}}
	for i := range 3 { // fresh connections, fresh nonces
		resp, err := hc.Get(fmt.Sprintf("http://sandbox/n%d", i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("hello from the sandbox: /n%d", i); string(body) != want {
			t.Fatalf("body %q, want %q", body, want)
		}
		hc.CloseIdleConnections()
	}
	if _, err := p.c.DialPort(ctx, freePort(t)); err == nil {
		t.Fatal("DialPort to a closed port succeeded")
	}
	if _, err := p.c.Start(ctx, cmd); err == nil {
		t.Fatal("a second Start succeeded")
	}
	if err := main.Signal("SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if e, err := main.Exit(); err != nil || !killed(e) {
		t.Fatalf("main's exit %+v %v, want killed", e, err)
	}
	if out.String() != "listening\n" {
		t.Fatalf("main's stdout %q", out.String())
	}
	if f := p.c.Faults(); len(f) != 0 {
		t.Fatalf("faults: %v", f)
	}
}

// TestStartFails: a main command that exits before its port accepts, and
// one whose port never accepts within the wait, fail Start.
func TestStartFails(t *testing.T) {
	ctx := ctxT(t)
	p := newPair(t)
	cmd := helperCmd("exit")
	cmd.WaitPort = freePort(t)
	if _, err := p.c.Start(ctx, cmd); err == nil || !strings.Contains(err.Error(), "code 7") {
		t.Fatalf("Start of a command that exits: %v", err)
	}
	p = newPair(t)
	cmd = helperCmd("sleep")
	cmd.WaitPort, cmd.WaitTimeout = freePort(t), 1
	main, err := p.c.Start(ctx, cmd)
	if err == nil || !strings.Contains(err.Error(), "nothing accepted") {
		t.Fatalf("Start of a command that never listens: %v", err)
	}
	if e, err := main.Exit(); err != nil || !killed(e) {
		t.Fatalf("after the failed wait: %+v %v, want killed", e, err)
	}
}

// TestForwardLarge: many windows of data each way through one forwarded
// connection, intact; closing it on the host closes it inside.
func TestForwardLarge(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	inside := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			inside <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c) // echo until the host's close reaches here
		inside <- err
	}()
	p := newPair(t)
	conn, err := p.c.DialPort(ctxT(t), ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 100000) // 3.6 MB
	go func() { conn.Write(want) }()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the echo differs")
	}
	conn.Close()
	if err := <-inside; err != nil {
		t.Fatalf("inside, the connection ended with %v, want EOF", err)
	}
}
