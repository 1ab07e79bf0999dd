package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestL7Accepted(t *testing.T) {
	src := `version: 1
network:
  mode: proxy
  upstream_ca: /etc/corral/upstream.pem
  allow:
    - host: api.github.com
      access: read-only
      deny_rules:
        - {path: /admin/**}
    - host: "*.example.com"
      rules:
        - {method: GET, path: /repos/*/issues, query: {state: open, per_page: ["1*", "2*"]}}
        - {method: "*", path: /**}
    - {host: pypi.org, tls: passthrough}
    - {host: files.example.org, tls: inspect, ports: [443, 8443]}
`
	p, err := ParseFor([]byte(src), "p.yaml", OSLinux)
	if err != nil {
		t.Fatal(err)
	}
	a := p.Network.Allow
	if !a[0].Inspected() || !a[1].Inspected() || a[2].Inspected() || !a[3].Inspected() {
		t.Errorf("inspected: %v %v %v %v", a[0].Inspected(), a[1].Inspected(), a[2].Inspected(), a[3].Inspected())
	}
	if q := a[1].Rules[0].Query; len(q["state"]) != 1 || q["state"][0] != "open" || len(q["per_page"]) != 2 {
		t.Errorf("query = %v (a single glob is a list of one)", q)
	}
}

func TestL7Refused(t *testing.T) {
	for _, c := range []struct {
		entry     string // the allow entry's lines after "- host: h.example.com"
		field     string
		line, col int
		msg       string
	}{
		{"tls: mitm", "network.allow[0].tls", 6, 12, `tls "mitm" is not inspect or passthrough`},
		{"tls: passthrough\n      access: read-only", "network.allow[0].tls", 6, 12, "could never apply"},
		{"access: readonly", "network.allow[0].access", 6, 15, `access "readonly" is not`},
		{"access: full\n      rules: [{method: GET}]", "network.allow[0].access", 6, 15, "give one"},
		{"rules: [{method: get}]", "network.allow[0].rules[0].method", 6, 24, `must be written "GET"`},
		{"rules: [{method: FETCH}]", "network.allow[0].rules[0].method", 6, 24, "unknown method"},
		{"rules: [{path: repos}]", "network.allow[0].rules[0].path", 6, 22, "does not start with /"},
		{"rules: [{path: '/a/**b'}]", "network.allow[0].rules[0].path", 6, 22, "** must be a whole segment"},
		{"rules: [{path: '/a?x=1'}]", "network.allow[0].rules[0].path", 6, 22, "query or fragment"},
		{"rules: [{path: '/a/../b'}]", "network.allow[0].rules[0].path", 6, 22, `".." segment`},
		{"rules: [{path: '/a%2Fb'}]", "network.allow[0].rules[0].path", 6, 22, "percent-escape"},
		{"deny_rules: [{query: {x: []}}]", "network.allow[0].deny_rules[0].query.x", 6, 32, "has no patterns"},
		{"tls: inspect\n      ports: [80]", "network.allow[0].ports[0]", 7, 15, "port 80 is plain HTTP"},
	} {
		src := "version: 1\nnetwork:\n  mode: proxy\n  allow:\n    - host: h.example.com\n      " + c.entry + "\n"
		_, err := ParseFor([]byte(src), "p.yaml", OSLinux)
		var pe *Error
		if errs := asErrors(err); len(errs) > 0 {
			pe = errs[0]
		}
		if pe == nil || pe.Field != c.field || pe.Line != c.line || pe.Column != c.col || !strings.Contains(pe.Msg, c.msg) || pe.Hint == "" {
			t.Errorf("%q: got %v (%+v), want %s at %d:%d containing %q with a hint", c.entry, err, pe, c.field, c.line, c.col, c.msg)
		}
	}
	for _, list := range []string{"deny", "allow_private"} {
		_, err := ParseFor(proxyPolicy(list, "10.0.0.0/8", "access: read-only"), "p.yaml", OSLinux)
		if err == nil || !strings.Contains(err.Error(), "take no tls, access, rules") {
			t.Errorf("%s with access: %v", list, err)
		}
	}
	if _, err := ParseFor([]byte("version: 1\nnetwork:\n  mode: proxy\n  upstream_ca: ca.pem\n"), "p.yaml", OSLinux); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("relative upstream_ca: %v", err)
	}
	if _, err := ParseFor([]byte("version: 1\nnetwork:\n  mode: none\n  upstream_ca: /ca.pem\n"), "p.yaml", OSLinux); err == nil || !strings.Contains(err.Error(), "only applies to mode proxy") {
		t.Errorf("upstream_ca in mode none: %v", err)
	}
}

// asErrors unpacks Parse's error into its positioned errors.
func asErrors(err error) []*Error {
	var out []*Error
	var list interface{ Unwrap() []error }
	if errors.As(err, &list) {
		for _, e := range list.Unwrap() {
			var pe *Error
			if errors.As(e, &pe) {
				out = append(out, pe)
			}
		}
		return out
	}
	var pe *Error
	if errors.As(err, &pe) {
		out = append(out, pe)
	}
	return out
}
