//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/gateway"
	"github.com/corral-sandbox/corral/internal/peerhttp"
	"github.com/corral-sandbox/corral/session"
)

// runSocketDir is where a `corral run` in progress serves its approvers'
// API, one socket per run named after its pid: /run/corral/runs as root,
// else $XDG_RUNTIME_DIR/corral/runs, else ~/.local/state/corral/runs
// (gateway.DefaultSocket's order). peerhttp.ListenUnix makes it 0700.
func runSocketDir() string {
	return filepath.Join(filepath.Dir(gateway.DefaultSocket()), "runs")
}

// runSocket is run pid's approvers' socket.
func runSocket(pid int) string { return filepath.Join(runSocketDir(), strconv.Itoa(pid)+".sock") }

// serveRunConsent serves the approvers' API of sess's consent broker on
// this run's socket (the caller's uid and root only: peerhttp.OwnerOnly) and,
// with a terminal, prompts on it. stop ends both and removes the socket.
func serveRunConsent(sess *session.Session, prompt *ttyPrompt) (stop func(), err error) {
	b := sess.Consent()
	if b == nil {
		return func() {}, nil
	}
	hub := consent.NewHub()
	hub.Add(b)
	path := runSocket(os.Getpid())
	l, err := peerhttp.ListenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("consent: approvals socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	api := consent.ApproverHandler(hub, func(r *http.Request) string {
		if uid, ok := peerhttp.PeerUID(r); ok {
			return fmt.Sprintf("uid %d", uid)
		}
		return "unknown"
	})
	// The watch streams end with the run (peerhttp.EndWith): corral run
	// must not wait for a connected `corral approvals watch` to exit.
	h := peerhttp.EndWith(ctx, peerhttp.OwnerOnly(api))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = peerhttp.Serve(ctx, l, h)
	}()
	if prompt != nil {
		// The prompt is an approver from now on, before the workload
		// starts: a request it makes at once is pending, not denied for
		// want of an approver.
		events, unwatch := b.Watch()
		go prompt.serve(ctx, b, events, unwatch)
	} else {
		fmt.Fprintf(os.Stderr, "corral: consent: the command may ask for folders or hosts; decide with `corral approvals watch --run %d` (or run with -t to be asked here)\n", os.Getpid())
	}
	return func() {
		cancel()
		_ = l.Close()
		<-done
		_ = os.Remove(path)
	}, nil
}

// ttyPrompt asks the person at corral run -t's terminal about consent
// requests. It owns the terminal's input: the workload reads it through
// Stdin (a pipe) except while a prompt is up, when the answer's keys go to
// the prompt (so a prompt never races the workload for input).
type ttyPrompt struct {
	Stdin *os.File // the workload's end
	in    *os.File // the terminal
	out   io.Writer
	feed  *os.File // the pipe's write end

	mu      sync.Mutex
	answers chan byte // non-nil while a prompt is up
}

// newTTYPrompt takes over the terminal's input in (already raw: -t) and
// writes prompts to out.
func newTTYPrompt(in *os.File, out io.Writer) (*ttyPrompt, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &ttyPrompt{Stdin: r, in: in, out: out, feed: w}
	go p.route()
	return p, nil
}

// route hands the terminal's bytes to the prompt while one is up, else to
// the workload.
func (p *ttyPrompt) route() {
	defer p.feed.Close()
	buf := make([]byte, 4096)
	for {
		n, err := p.in.Read(buf)
		if n > 0 {
			p.mu.Lock()
			ch := p.answers
			p.mu.Unlock()
			if ch != nil {
				select {
				case ch <- buf[0]:
				default:
				}
			} else if _, werr := p.feed.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// serve prompts for each pending request of events (b.Watch: the
// prompt is b's approver) as it comes, one at a time, until ctx ends;
// then it calls cancel.
func (p *ttyPrompt) serve(ctx context.Context, b *consent.Broker, events <-chan consent.Event, cancel func()) {
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				return
			}
			if e.Activity != "requested" || e.Request == nil || e.Request.State != consent.StatePending {
				continue
			}
			p.ask(ctx, b, *e.Request)
		}
	}
}

// ask shows request r and decides it with the key pressed: y once, s for
// the session, a always, n deny, N deny for the session. It gives up when
// r is decided elsewhere or expires.
func (p *ttyPrompt) ask(ctx context.Context, b *consent.Broker, r consent.Request) {
	if cur, ok := b.Get(r.ID); !ok || cur.State != consent.StatePending {
		return
	}
	ch := make(chan byte, 1)
	p.mu.Lock()
	p.answers = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.answers = nil
		p.mu.Unlock()
	}()
	who := "an unknown process"
	if r.Requester.PID > 0 {
		who = fmt.Sprintf("pid %d (%s)", r.Requester.PID, shown(r.Requester.Exe))
	}
	what := string(r.Kind) + " " + shown(r.Target)
	if r.Kind == consent.KindFolder {
		what += " (" + string(r.Access) + ")"
	}
	// The terminal is raw (-t): lines end in \r\n. The reason is the
	// workload's text: control characters are shown escaped.
	fmt.Fprintf(p.out, "\r\ncorral: consent: %s asks for %s\r\n", who, what)
	if r.Reason != "" {
		fmt.Fprintf(p.out, "corral:   reason: %s\r\n", strconv.Quote(r.Reason))
	}
	fmt.Fprintf(p.out, "corral:   allowed to ask by %s; request %s\r\n", r.Ceiling, r.ID)
	fmt.Fprintf(p.out, "corral:   [y] once  [s] this session  [a] always  [n] deny  [N] deny for the session  (expires %s) ", r.Expires.Local().Format("15:04:05"))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if cur, ok := b.Get(r.ID); !ok || cur.State != consent.StatePending {
				fmt.Fprintf(p.out, "\r\ncorral: consent: %s: %s\r\n", r.ID, cur.State)
				return
			}
		case k := <-ch:
			d := consent.Decision{Digest: r.Digest, By: fmt.Sprintf("tty (uid %d)", os.Getuid()), At: time.Now()}
			switch k {
			case 'y', 'Y':
				d.Approve, d.Scope = true, consent.ScopeOnce
			case 's':
				d.Approve, d.Scope = true, consent.ScopeSession
			case 'a':
				d.Approve, d.Scope = true, consent.ScopeAlways
			case 'n':
			case 'N':
				d.ForSession = true
			default:
				continue
			}
			got, err := b.Decide(ctx, r.ID, d)
			if err != nil {
				fmt.Fprintf(p.out, "\r\ncorral: consent: %s\r\n", err)
				return
			}
			fmt.Fprintf(p.out, "\r\ncorral: consent: %s %s%s\r\n", r.ID, got.State, effectiveNote(got))
			return
		}
	}
}

// effectiveNote says, of an approved request, whether it is in force.
func effectiveNote(r consent.Request) string {
	if r.State != consent.StateApproved {
		if r.Detail != "" {
			return ": " + shown(r.Detail)
		}
		return ""
	}
	var b strings.Builder
	if r.Effective {
		b.WriteString(", in force")
	} else {
		b.WriteString(", not in force yet")
	}
	if r.Path != "" {
		b.WriteString(" at " + r.Path)
	}
	return b.String()
}
