// Package peerhttp serves HTTP on local endpoints whose clients are known
// by the OS, not by a secret: the gateway's API, and the approvers'
// consent API of a `corral run` or a service supervisor.
//
// On Linux the endpoint is a unix socket, 0600 in a 0700 directory, and a
// client is its uid (SO_PEERCRED, unix(7)): PeerUID, Allowed, OwnerOnly.
//
// On Windows it is a named pipe, \\.\pipe\NAME (ListenPipe, DialPipe), and
// a client is the user SID of its token: PeerSID, AllowedPipePeer,
// OwnerOnlySID. The design, and why:
//
//   - The pipe's DACL (protected, no inheritance) grants GENERIC_ALL to the
//     server's user, SYSTEM and Administrators, nobody else. SYSTEM and an
//     elevated Administrator are what root is on Linux (Allowed lets root
//     in): both can take the pipe's ownership or read the server's memory
//     anyway, so shutting them out would protect nothing, and a gateway
//     run as a service (SYSTEM) could not otherwise be used by an
//     administrator. Under UAC a non-elevated administrator's token holds
//     Administrators as deny-only, so the ACE does not let it in. Docker's
//     and containerd's pipes use the same two ACEs.
//   - The pipe is made with FILE_CREATE (what FILE_FLAG_FIRST_PIPE_INSTANCE
//     asks of NtCreateNamedPipeFile; go-winio does this): if the name
//     exists, another process made it first, maybe to receive our clients'
//     requests, and ListenPipe fails instead of adding an instance to it.
//     Other users cannot add instances to ours: that needs
//     FILE_CREATE_PIPE_INSTANCE, which the DACL grants to nobody else.
//   - The client side checks the other way round: DialPipe accepts only a
//     pipe whose owner is the caller's user, SYSTEM or Administrators
//     (nobody else can make a pipe with such an owner), so a name
//     squatted while the server was down is refused before a byte of the
//     request is written.
//   - Remote clients (SMB) are rejected: PIPE_REJECT_REMOTE_CLIENTS.
//   - The client is identified by impersonating it on the connection
//     (ImpersonateNamedPipeClient, then the thread token's user and
//     groups), once per connection, after its first request was read. Its
//     security context is the one captured when it opened the pipe, so
//     nothing can change under us. GetNamedPipeClientProcessId plus the
//     process's token was not used: the process may have exited and its
//     id been reused between the two calls, and another user's process
//     may not even be openable. DialPipe lets the server identify the
//     caller but not act as it (SecurityIdentification); a client that
//     allows only anonymous impersonation cannot be identified and is
//     refused.
//
// Wine 8 (the CI's Windows lane) differs, and the tests skip what it does
// not do as Wine artifacts: FILE_CREATE adds an instance to a pipe that
// exists instead of failing, the client's impersonation level is ignored
// (an anonymous client is identified all the same), and go-winio's first
// instance, which Windows keeps disconnected, listens: the first client
// connects to it and is never answered (the tests connect to it first).
//
// Serve is the same on both: HTTP/1.1 and cleartext HTTP/2 on the
// listener, each request carrying its connection's peer.
package peerhttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// peerKey holds a connection's peer in its context: an int uid on a unix
// socket (Linux), a *pipePeer on a named pipe (Windows).
type peerKey struct{}

// Serve serves h on l (HTTP/1.1 and cleartext HTTP/2, so gRPC clients
// work too) until ctx ends, then lets the calls under way finish for up to
// 30 s. A unix connection's peer uid (PeerUID) or a named pipe's client
// (PeerSID) is on each request.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnContext: connPeer}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true) // over TLS (the listener's)
	srv.Protocols.SetUnencryptedHTTP2(true)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
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

// EndWith is h with each request's context ending when ctx ends too: a
// long stream (an approvers' watch) then ends with its server, whose
// shutdown would otherwise wait for it (Serve's 30 s).
func EndWith(ctx context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc, end := context.WithCancel(r.Context())
		defer end()
		defer context.AfterFunc(ctx, end)()
		h.ServeHTTP(w, r.WithContext(rc))
	})
}
