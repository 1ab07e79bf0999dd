package consent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/corral-sandbox/corral/provider"
)

// Client speaks the approvers' API (ApproverHandler) of a corral run, a
// service supervisor or a gateway.
type Client struct {
	hc    *http.Client
	base  string
	token string
}

// NewClient connects to addr: "unix:PATH", or "http://IP:PORT" on
// loopback (the token, when given, is sent as a bearer token; a
// non-loopback address is refused: the token would cross the network in
// clear).
func NewClient(addr, token string) (*Client, error) {
	tr := &http.Transport{}
	base := addr
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		base = "http://corral-approvals"
	} else if rest, ok := strings.CutPrefix(addr, "http://"); ok {
		host := rest
		if h, _, err := net.SplitHostPort(rest); err == nil {
			host = h
		}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); (err != nil || !ip.IsLoopback()) && host != "localhost" {
			return nil, fmt.Errorf("approvals address %q: not loopback; the token would cross the network in clear", addr)
		}
	} else {
		return nil, fmt.Errorf("approvals address %q: want unix:PATH or http://IP:PORT", addr)
	}
	return &Client{hc: &http.Client{Transport: tr}, base: strings.TrimSuffix(base, "/"), token: token}, nil
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
		var e apiError
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
			if e.Hint != "" {
				msg += " (" + e.Hint + ")"
			}
		}
		switch resp.StatusCode {
		case http.StatusNotFound:
			return provider.Errorf(provider.CodeNotFound, "%s", msg)
		case http.StatusConflict:
			return provider.Errorf(provider.CodeStale, "%s", msg)
		}
		return fmt.Errorf("%s (HTTP %d)", msg, resp.StatusCode)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
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

// Watch stays connected as an approver, calling fn for each Event, until
// ctx ends or the server goes.
func (c *Client) Watch(ctx context.Context, fn func(Event)) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/approvals/watch", nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return provider.Wrap(provider.CodeNotFound, "approvals", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("watch: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
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
