//go:build linux || windows

package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/audit"
	gw "github.com/corral-sandbox/corral/gateway/gen/corral/gateway/v1"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/store"
)

// dialTimeout bounds how long a forward waits for the sandbox's port.
const dialTimeout = 10 * time.Second

// maxPeer bounds the caller's peer address kept in the audit log.
const maxPeer = 128

// ForwardSandbox carries one TCP connection between the caller and port
// on a ready sandbox's own loopback, through the sandbox's provider
// (provider.PortDialer). It shares the sandbox's gate as an exec does: a
// stop, delete or recreate ends it first. Each connection is audited as
// Network Activity: Open and Close, or Refuse when nothing listens.
func (s *Server) ForwardSandbox(ctx context.Context, stream *connect.BidiStream[gw.ForwardRequest, gw.ForwardResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	m := first.GetStart()
	switch {
	case m == nil:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be start"))
	case m.Port < 1 || m.Port > 65535:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("port %d: want 1 to 65535", m.Port))
	case len(m.Peer) > maxPeer:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("peer: at most %d bytes", maxPeer))
	}
	id := s.idOf(m.Id)
	if _, err := s.cfg.Store.Get(id); err != nil {
		return storeErr(id, err) // before making a gate for an id that does not exist
	}
	reqCtx := ctx
	ctx, done := s.gate(id).exec(ctx)
	defer done()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return storeErr(id, err)
	}
	s.mu.Lock()
	h := s.live[id]
	s.mu.Unlock()
	if rec.Phase != store.PhaseReady || h == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is %s, not ready", id, rec.Phase))
	}
	pd, ok := h.sess.Sandbox().(provider.PortDialer)
	if !ok {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s: its provider %s cannot reach the sandbox's loopback (no port forwarding)", id, rec.Provider))
	}
	run := audit.RunInfo{SandboxID: id, PolicyHash: rec.PolicyHash, Provider: rec.Provider, Version: s.cfg.Version}
	f := audit.NewForward(m.Peer, int(m.Port))
	conn, err := pd.DialServed(int(m.Port), dialTimeout)
	if err != nil {
		h.log.Emit(audit.ForwardRefused(run, f, err.Error()))
		if errors.Is(err, syscall.ECONNREFUSED) {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: nothing listens on port %d of its loopback", id, m.Port))
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: port %d: %w", id, m.Port, err))
	}
	h.log.Emit(audit.ForwardOpened(run, f))
	in, out, err := pump(ctx, conn, stream)
	reason := ""
	switch {
	case ctx.Err() != nil && reqCtx.Err() == nil:
		reason = "the sandbox is being stopped, deleted or recreated"
		err = connect.NewError(connect.CodeAborted, fmt.Errorf("sandbox %s: the forward was ended: %s", id, reason))
	case reqCtx.Err() != nil:
		reason = "the caller went away"
	case err != nil:
		reason = err.Error()
		err = connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: port %d: %w", id, m.Port, err))
	}
	h.log.Emit(audit.ForwardClosed(run, f, in, out, reason))
	return err
}

// lingerAfterEOF is how long a connection that cannot be half-closed
// stays up, quiet, after the caller closed its side.
const lingerAfterEOF = 2 * time.Second

// halfCloser is a connection whose sending side can be closed alone.
type halfCloser interface{ CloseWrite() error }

// pump copies bytes both ways between conn and the caller's stream until
// both sides have finished sending or ctx ends, and closes conn. It
// returns the bytes carried into the sandbox (in) and out of it, and the
// first error of either side.
func pump(ctx context.Context, conn net.Conn, stream *connect.BidiStream[gw.ForwardRequest, gw.ForwardResponse]) (in, out int64, err error) {
	// The receiver may outlive pump (it ends with the call, below), so
	// the first error is read under the lock it is written under.
	var failMu sync.Mutex
	var first error
	fail := func(e error) {
		failMu.Lock()
		defer failMu.Unlock()
		if first == nil {
			first = e
		}
	}
	var nIn atomic.Int64
	var callerDone atomic.Bool // the caller half-closed, and conn cannot
	var sendMu sync.Mutex      // the receiver's goroutine never sends; this guards the rest
	send := func(r *gw.ForwardResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	if err := send(&gw.ForwardResponse{Output: &gw.ForwardResponse_Connected{Connected: true}}); err != nil {
		conn.Close()
		return 0, 0, err
	}
	inDone := make(chan struct{})
	go func() { // the caller's bytes into the sandbox
		defer close(inDone)
		for {
			msg, err := stream.Receive()
			if errors.Is(err, io.EOF) { // the caller's half-close
				if hc, ok := conn.(halfCloser); ok {
					_ = hc.CloseWrite()
				} else {
					// No half-close inside (mxc's relay): the connection
					// ends once the sandbox's side is quiet for
					// lingerAfterEOF, or a server that keeps it alive
					// would hold it until the forward ends.
					callerDone.Store(true)
					_ = conn.SetReadDeadline(time.Now().Add(lingerAfterEOF))
				}
				return
			}
			if err != nil {
				fail(err)
				conn.Close()
				return
			}
			if b := msg.GetData(); len(b) > 0 {
				if _, err := conn.Write(b); err != nil {
					fail(err)
					conn.Close()
					return
				}
				nIn.Add(int64(len(b)))
			}
		}
	}()
	outDone := make(chan struct{})
	go func() { // the sandbox's bytes back
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if callerDone.Load() {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					err = io.EOF // quiet since the caller's close: the end
				} else if n > 0 {
					_ = conn.SetReadDeadline(time.Now().Add(lingerAfterEOF))
				}
			}
			if n > 0 {
				if err := send(&gw.ForwardResponse{Output: &gw.ForwardResponse_Data{Data: append([]byte(nil), buf[:n]...)}}); err != nil {
					fail(err)
					conn.Close()
					return
				}
				out += int64(n)
			}
			if errors.Is(err, io.EOF) {
				if err := send(&gw.ForwardResponse{Output: &gw.ForwardResponse_Eof{Eof: true}}); err != nil {
					fail(err)
				}
				return
			}
			if err != nil {
				fail(err)
				return
			}
		}
	}()
	both := make(chan struct{})
	go func() { <-inDone; <-outDone; close(both) }()
	select {
	case <-both:
	case <-ctx.Done():
		conn.Close()
		<-outDone // the receiver may block on the caller: it ends with the call
	}
	conn.Close()
	failMu.Lock()
	err = first
	failMu.Unlock()
	if ctx.Err() == nil && errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return nIn.Load(), out, err
}
