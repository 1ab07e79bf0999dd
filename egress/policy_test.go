package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// TestWildcardMatch: "*." matches exactly one label, "**." one or more;
// neither matches the name itself, a look-alike suffix or an IP literal.
func TestWildcardMatch(t *testing.T) {
	for _, c := range []struct {
		rule, host string
		want       bool
	}{
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "xn--bcher-kva.example.com", true},
		{"*.example.com", "a.b.example.com", false},
		{"*.example.com", "a.b.c.example.com", false},
		{"*.example.com", "example.com", false},
		{"*.example.com", "aexample.com", false},
		{"*.example.com", "a.example.com.evil.test", false},
		{"*.Example.COM.", "a.example.com", true},
		{"**.example.com", "a.example.com", true},
		{"**.example.com", "a.b.example.com", true},
		{"**.example.com", "a.b.c.example.com", true},
		{"**.example.com", "example.com", false},
		{"**.example.com", "aexample.com", false},
		{"**.example.com", "a.example.org", false},
		{"*.a.example.com", "b.a.example.com", true},
		{"*.a.example.com", "a.example.com", false},
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "x.api.example.com", false},
		{"intranet", "intranet", true},
		{"intranet", "a.intranet", false},
	} {
		r, err := compileRule(Rule{Host: c.rule}, false)
		if err != nil {
			t.Fatalf("%s: %v", c.rule, err)
		}
		if got := r.matchTarget(c.host, netip.Addr{}); got != c.want {
			t.Errorf("%s matches %s = %v, want %v", c.rule, c.host, got, c.want)
		}
	}
	for _, rule := range []string{"*.example.com", "**.example.com"} {
		r, _ := compileRule(Rule{Host: rule}, false)
		if ip := netip.MustParseAddr("10.0.0.1"); r.matchTarget(ip.String(), ip) {
			t.Errorf("%s matches an IP literal", rule)
		}
		if r.text != strings.ToLower(rule) {
			t.Errorf("%s: text %q", rule, r.text)
		}
	}
}

// TestWildcardRefused: the odd and ambiguous wildcard forms are refused,
// each with its reason; deny rules are held to the same shapes.
func TestWildcardRefused(t *testing.T) {
	for host, want := range map[string]string{
		"*":                "bare wildcard",
		"**":               "bare wildcard",
		"*.":               "bare wildcard",
		"**.":              "bare wildcard",
		"*.com":            "top-level domain",
		"**.com":           "top-level domain",
		"**.com.":          "top-level domain",
		"***.example.com":  "whole first label",
		"*x.example.com":   "whole first label",
		"x*.example.com":   "whole first label",
		"a**.example.com":  "whole first label",
		"*.*.example.com":  "only as the whole first label",
		"**.*.example.com": "only as the whole first label",
		"*.**.example.com": "only as the whole first label",
		"a.*.example.com":  "only as the whole first label",
		"a.**":             "only as the whole first label",
		"**.1.2.3":         "numeric name",
	} {
		for _, p := range []Policy{{Allow: []Rule{{Host: host}}}, {Deny: []Rule{{Host: host}}}} {
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%+v: got %v, want …%s…", p, err, want)
			}
		}
	}
}

// TestAllowHintSingleLabel: the hint for a denied single-label name is a
// rule the policy accepts (with single_label: true); others stay plain.
func TestAllowHintSingleLabel(t *testing.T) {
	for host, want := range map[string]string{
		"intranet":        "network.allow: [{host: intranet, ports: [80], single_label: true}]",
		"localhost":       "network.allow: [{host: localhost, ports: [80]}]",
		"api.example.com": "network.allow: [{host: api.example.com, ports: [80]}]",
		"10.0.0.1":        "network.allow: [{host: 10.0.0.1, ports: [80]}]",
		"::1":             "network.allow: [{host: ::1, ports: [80]}]",
	} {
		if got := allowHint(host, 80); got != want {
			t.Errorf("allowHint(%s) = %q, want %q", host, got, want)
		}
	}
}
