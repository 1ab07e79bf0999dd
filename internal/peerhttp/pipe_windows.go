package peerhttp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"
)

// PipePrefix starts every local named pipe's path.
const PipePrefix = `\\.\pipe\`

// Well-known SIDs: the ones the pipe's DACL grants and a peer may be.
const (
	sidSystem = "S-1-5-18"     // LocalSystem
	sidAdmins = "S-1-5-32-544" // BUILTIN\Administrators
)

// PipePath is \\.\pipe\NAME, or an error when name is empty, holds a
// backslash (Windows forbids it in a pipe's name) or makes the path
// longer than Windows' 256 characters.
func PipePath(name string) (string, error) {
	if name == "" || strings.Contains(name, `\`) || len(PipePrefix)+len(name) > 256 {
		return "", fmt.Errorf("pipe name %q: want 1 to %d characters, no backslash", name, 256-len(PipePrefix))
	}
	return PipePrefix + name, nil
}

// self is this process's user SID (string form, "S-1-5-21-…").
var self = sync.OnceValues(func() (string, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return "", fmt.Errorf("this process's user: %w", err)
	}
	return u.User.Sid.String(), nil
})

// pipeSDDL is the pipe's security descriptor: owned by this process's
// user; a protected DACL granting all access to it, SYSTEM and
// Administrators only (the package doc says why these).
func pipeSDDL() (string, error) {
	me, err := self()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("O:%sD:P(A;;GA;;;%s)(A;;GA;;;SY)(A;;GA;;;BA)", me, me), nil
}

// ListenPipe listens on the named pipe \\.\pipe\NAME (PipePath), which
// only this process's user, SYSTEM and Administrators may open, remote
// clients never. A pipe of that name that exists already (another server,
// or a squatter) is an error: the name is never shared.
func ListenPipe(name string) (net.Listener, error) {
	path, err := PipePath(name)
	if err != nil {
		return nil, err
	}
	sddl, err := pipeSDDL()
	if err != nil {
		return nil, err
	}
	// go-winio makes the first instance with FILE_CREATE (fails when the
	// name exists) and every instance with PIPE_REJECT_REMOTE_CLIENTS.
	l, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: sddl})
	if errors.Is(err, windows.ERROR_ALREADY_EXISTS) || errors.Is(err, windows.ERROR_PIPE_BUSY) || errors.Is(err, windows.ERROR_ACCESS_DENIED) {
		return nil, fmt.Errorf("%s: the pipe exists already (another server, or another process holds the name): %w", path, err)
	}
	return l, err
}

// DialPipe connects to the named pipe \\.\pipe\NAME (PipePath), letting
// the server identify this process's user but not act as it
// (SecurityIdentification). A pipe owned by anyone but this user, SYSTEM
// or Administrators is refused before anything is written to it: another
// user made it to receive our requests. A busy pipe (every instance in
// use) is retried until ctx ends; a missing one is an error at once.
func DialPipe(ctx context.Context, name string) (net.Conn, error) {
	path, err := PipePath(name)
	if err != nil {
		return nil, err
	}
	c, err := winio.DialPipeAccessImpLevel(ctx, path, windows.GENERIC_READ|windows.GENERIC_WRITE, winio.PipeImpLevelIdentification)
	if err != nil {
		return nil, err
	}
	owner, err := pipeOwner(c)
	if err == nil && !trustedOwner(owner) {
		err = fmt.Errorf("%s is owned by %s, not by this user, SYSTEM or Administrators: refusing to talk to it (%w)", path, owner, fs.ErrPermission)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// handleOf is the pipe handle under a go-winio connection.
func handleOf(c net.Conn) (windows.Handle, bool) {
	f, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	return windows.Handle(f.Fd()), true
}

// pipeOwner is the owner SID of the pipe under c.
func pipeOwner(c net.Conn) (string, error) {
	h, ok := handleOf(c)
	if !ok {
		return "", fmt.Errorf("%T is not a named pipe", c)
	}
	sd, err := windows.GetSecurityInfo(h, windows.SE_KERNEL_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return "", fmt.Errorf("the pipe's owner: %w", err)
	}
	o, _, err := sd.Owner()
	if err != nil || o == nil {
		return "", fmt.Errorf("the pipe has no owner: %v", err)
	}
	return o.String(), nil
}

func trustedOwner(sid string) bool {
	me, err := self()
	return (err == nil && sid == me) || sid == sidSystem || sid == sidAdmins
}

// pipePeer is a pipe connection's client, identified once, on demand
// (after a request was read from it: impersonation may need that).
type pipePeer struct {
	h     windows.Handle
	once  sync.Once
	sid   string // "" when it could not be identified
	admin bool   // Administrators is an enabled group of its token
}

func (p *pipePeer) identify() {
	p.once.Do(func() {
		p.sid, p.admin, _ = clientOf(p.h)
	})
}

// connPeer puts a pipe connection's client in its context (Serve's
// ConnContext); it is identified on the first PeerSID.
func connPeer(ctx context.Context, c net.Conn) context.Context {
	if h, ok := handleOf(c); ok && c.LocalAddr().Network() == "pipe" {
		return context.WithValue(ctx, peerKey{}, &pipePeer{h: h})
	}
	return ctx
}

var impersonateNamedPipeClient = windows.NewLazySystemDLL("advapi32.dll").NewProc("ImpersonateNamedPipeClient")

// clientOf is the user SID of h's client and whether it is an elevated
// administrator, read from the token the pipe gives the server when it
// impersonates the client. This runs on a thread of its own, which ends
// with the goroutine should reverting to this process's identity fail,
// so no other goroutine ever runs as the client.
func clientOf(h windows.Handle) (sid string, admin bool, err error) {
	type result struct {
		sid   string
		admin bool
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if ok, _, e := impersonateNamedPipeClient.Call(uintptr(h)); ok == 0 {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("ImpersonateNamedPipeClient: %w", e)}
			return
		}
		var tok windows.Token
		// openAsSelf: an identification-level token may not be used to
		// open the thread itself.
		err := windows.OpenThreadToken(windows.CurrentThread(), windows.TOKEN_QUERY, true, &tok)
		if rerr := windows.RevertToSelf(); rerr != nil {
			if err == nil {
				tok.Close()
			}
			ch <- result{err: fmt.Errorf("RevertToSelf: %w", rerr)} // the thread stays locked: it ends with us
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			ch <- result{err: fmt.Errorf("the client's token: %w", err)}
			return
		}
		defer tok.Close()
		var r result
		u, err := tok.GetTokenUser()
		if err != nil {
			ch <- result{err: fmt.Errorf("the client's user: %w", err)}
			return
		}
		r.sid = u.User.Sid.String()
		admins, err := windows.StringToSid(sidAdmins)
		if err == nil {
			r.admin, err = tok.IsMember(admins) // enabled groups only: not a filtered UAC token's
		}
		if err != nil {
			ch <- result{err: fmt.Errorf("the client's groups: %w", err)}
			return
		}
		ch <- r
	}()
	r := <-ch
	return r.sid, r.admin, r.err
}

// PeerSID is the user SID ("S-1-5-21-…") of the client of r's connection
// when it came over a named pipe served by Serve ("" when the client could
// not be identified, e.g. it allowed only anonymous impersonation); ok
// false on TCP.
func PeerSID(r *http.Request) (sid string, ok bool) {
	p, ok := r.Context().Value(peerKey{}).(*pipePeer)
	if !ok {
		return "", false
	}
	p.identify()
	return p.sid, true
}

// AllowedPipePeer reports whether r came over a named pipe served by Serve
// from a client that may use this process's API: of this process's user,
// SYSTEM, or an elevated administrator (what root is on Linux). False on
// TCP and for a client that could not be identified.
func AllowedPipePeer(r *http.Request) bool {
	p, ok := r.Context().Value(peerKey{}).(*pipePeer)
	if !ok {
		return false
	}
	p.identify()
	me, err := self()
	return p.sid != "" && ((err == nil && p.sid == me) || p.sid == sidSystem || p.admin)
}

// OwnerOnlySID lets a request reach h only over a named pipe from an
// AllowedPipePeer client: 403 otherwise (TCP included).
func OwnerOnlySID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !AllowedPipePeer(r) {
			sid, _ := PeerSID(r)
			me, _ := self()
			if sid == "" {
				sid = unidentified
			}
			http.Error(w, fmt.Sprintf("%s may not use this pipe (only %s, SYSTEM and Administrators)", sid, me), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// LocalForm is the local endpoint address this OS has.
const LocalForm = "pipe:NAME"

// unidentified names a pipe client whose token could not be read.
const unidentified = "an unidentified client"

// Superuser names who, besides the server's own user, may use a local
// endpoint (AllowedPipePeer).
const Superuser = "SYSTEM and elevated Administrators"

func listenLocal(_, name string) (net.Listener, error) { return ListenPipe(name) }

func dialLocal(ctx context.Context, _, name string) (net.Conn, error) { return DialPipe(ctx, name) }

func localPeer(r *http.Request) (who string, allowed, ok bool) {
	sid, ok := PeerSID(r)
	if sid == "" {
		sid = unidentified
	}
	return sid, ok && AllowedPipePeer(r), ok
}
