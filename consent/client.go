package consent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/peerhttp"
	"github.com/corral-sandbox/corral/provider"
)

// Client speaks the approvers' API (ApproverHandler) of a corral run, a
// service supervisor or a gateway.
type Client struct {
	hc    *http.Client
	base  string
	token string
}

// NewClient connects to addr: a local endpoint (peerhttp.DialLocal's
// "unix:PATH" or "pipe:NAME"), or "http://HOST:PORT[/PATH]"
// with HOST a loopback IP literal or localhost (the token, when given, is
// sent as a bearer token; any other host, a user part ("http://127.0.0.1:80@host",
// where the host is what follows the @), a query or a fragment is
// refused: the token would cross the network in clear). Redirects are
// not followed.
func NewClient(addr, token string) (*Client, error) {
	tr := &http.Transport{}
	var base string
	if peerhttp.IsLocal(addr) {
		if err := peerhttp.CheckLocal(addr); err != nil {
			return nil, fmt.Errorf("approvals address: %w", err)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return peerhttp.DialLocal(ctx, addr) }
		base = "http://corral-approvals"
	} else if strings.HasPrefix(addr, "http://") {
		u, err := url.Parse(addr)
		if err != nil || u.User != nil || u.Host == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			return nil, fmt.Errorf("approvals address %q: want http://IP:PORT, without a user, query or fragment", addr)
		}
		host := u.Hostname()
		if ip, err := netip.ParseAddr(host); (err != nil || !ip.IsLoopback()) && host != "localhost" {
			return nil, fmt.Errorf("approvals address %q: not loopback; the token would cross the network in clear", addr)
		}
		base = "http://" + u.Host + u.EscapedPath()
	} else {
		return nil, fmt.Errorf("approvals address %q: want %s or http://IP:PORT", addr, peerhttp.LocalForm)
	}
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Client{hc: hc, base: strings.TrimSuffix(base, "/"), token: token}, nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return provider.Wrap(provider.CodeNotFound, "approvals", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode >= 300 {
		return statusError(resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// statusError is an error answer (status >= 300) with body b (apiError
// JSON, or text): 404 is provider.CodeNotFound, 409 CodeStale (decided
// first, or the digest changed), others name their status.
func statusError(status int, b []byte) error {
	var e apiError
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
		if e.Hint != "" {
			msg += " (" + e.Hint + ")"
		}
	}
	switch status {
	case http.StatusNotFound:
		return provider.Errorf(provider.CodeNotFound, "%s", msg)
	case http.StatusConflict:
		return provider.Errorf(provider.CodeStale, "%s", msg)
	}
	return fmt.Errorf("%s (HTTP %d)", msg, status)
}

// List is the requests (state "" for all), newest first.
func (c *Client) List(ctx context.Context, sandbox string, state State) ([]Request, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	if state != "" {
		q.Set("state", string(state))
	}
	var out struct {
		Requests []Request `json:"requests"`
	}
	err := c.do(ctx, "GET", "/v1/approvals?"+q.Encode(), nil, &out)
	return out.Requests, err
}

// Get is request id.
func (c *Client) Get(ctx context.Context, id string) (Request, error) {
	var r Request
	err := c.do(ctx, "GET", "/v1/approvals/"+url.PathEscape(id), nil, &r)
	return r, err
}

// Approve approves request id with d's scope, ttl, digest and read-only.
func (c *Client) Approve(ctx context.Context, id string, d Decision) (Request, error) {
	var r Request
	err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(id)+"/approve", approveBody{Scope: d.Scope, TTL: d.TTL, Digest: d.Digest, ReadOnly: d.ReadOnly}, &r)
	return r, err
}

// Deny denies request id with d's reason, for-session and digest.
func (c *Client) Deny(ctx context.Context, id string, d Decision) (Request, error) {
	var r Request
	err := c.do(ctx, "POST", "/v1/approvals/"+url.PathEscape(id)+"/deny", denyBody{Reason: d.Reason, ForSession: d.ForSession, Digest: d.Digest}, &r)
	return r, err
}

// Grants are the grants, desired against effective.
func (c *Client) Grants(ctx context.Context, sandbox string) ([]Grant, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	var out struct {
		Grants []Grant `json:"grants"`
	}
	err := c.do(ctx, "GET", "/v1/grants?"+q.Encode(), nil, &out)
	return out.Grants, err
}

// Revoke revokes grant id (kill: its holders too).
func (c *Client) Revoke(ctx context.Context, id string, kill bool) (Grant, error) {
	var g Grant
	err := c.do(ctx, "POST", "/v1/grants/"+url.PathEscape(id)+"/revoke", map[string]bool{"kill": kill}, &g)
	return g, err
}

// watchConnectFor bounds how long Watch keeps retrying a connection that
// a server dropped or refused before answering (a corral run or gateway
// starting, or replacing a stale socket left at its path).
const watchConnectFor = 5 * time.Second

// Watch stays connected as an approver, calling fn for each Event, until
// ctx ends (ctx.Err()) or the server goes. A connection that fails before
// the server answered is retried for up to watchConnectFor (transient),
// then CodeNotFound; an endpoint that does not exist or may not be used
// (fs.ErrNotExist, fs.ErrPermission: a pipe another user owns), an HTTP
// error and a stream that ends are not retried.
func (c *Client) Watch(ctx context.Context, fn func(Event)) error {
	var resp *http.Response
	for end := time.Now().Add(watchConnectFor); ; {
		req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/approvals/watch", nil)
		if err != nil {
			return err
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err = c.hc.Do(req)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) || time.Now().After(end) {
			return provider.Wrap(provider.CodeNotFound, "approvals", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("watch: %w", statusError(resp.StatusCode, b))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e Event
		if json.Unmarshal([]byte(data), &e) == nil {
			fn(e)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sc.Err()
}

// transient reports whether err may pass on a retry: anything but an
// endpoint that is not there (ENOENT: no socket at the path) or may not be
// used (EACCES, EPERM). A server starting, or replacing a stale socket,
// refuses or drops connections before answering, and the client sees that
// as ECONNREFUSED, EOF, ECONNRESET, EPIPE or net/http's "server closed
// idle connection", depending on when the close came.
func transient(err error) bool {
	return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission)
}
