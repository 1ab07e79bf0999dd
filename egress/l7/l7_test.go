package l7

import (
	"net/url"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	set, err := Compile("", []Rule{
		{Method: "GET", Path: "/repos/*/issues"},
		{Method: "POST", Path: "/repos/**", Query: map[string][]string{"draft": {"true", "y*"}}},
		{Path: "/public/**"},
	}, []Rule{{Method: "DELETE"}, {Path: "/repos/secret/**"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path, query string
		want                bool
		rule                string
	}{
		{"GET", "/repos/a/issues", "", true, "rules[0] GET /repos/*/issues"},
		{"GET", "/repos/a/b/issues", "", false, ""},
		{"POST", "/repos/a/b", "draft=true", true, "rules[1] POST /repos/**?draft"},
		{"POST", "/repos", "draft=yes", true, "rules[1] POST /repos/**?draft"},
		{"POST", "/repos/a", "draft=true&draft=no", false, ""},
		{"POST", "/repos/a", "", false, ""},
		{"GET", "/public", "", true, "rules[2] * /public/**"},
		{"DELETE", "/public/x", "", false, "deny_rules[0] DELETE /**"},
		{"delete", "/public/x", "", false, "deny_rules[0] DELETE /**"},
		{"GET", "/repos/secret/issues", "", false, "deny_rules[1] * /repos/secret/**"},
		{"GET", "/REPOS/Secret/issues", "", false, "deny_rules[1] * /repos/secret/**"},
		{"GET", "/repos/secret", "", false, "deny_rules[1] * /repos/secret/**"},
		{"PUT", "/public/x", "", true, "rules[2] * /public/**"},
	} {
		q, _ := url.ParseQuery(c.query)
		d := set.Decide(c.method, c.path, q)
		if d.Allowed != c.want || c.rule != "" && d.Rule != c.rule || !d.Allowed && d.Hint == "" {
			t.Errorf("%s %s?%s: %+v, want allowed=%v rule %q and a hint when denied", c.method, c.path, c.query, d, c.want, c.rule)
		}
	}
	ro, _ := Compile(ReadOnly, nil, []Rule{{Path: "/admin"}})
	for m, want := range map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "POST": false, "get": false, "TRACE": false} {
		if d := ro.Decide(m, "/x", nil); d.Allowed != want {
			t.Errorf("read-only %s: %+v", m, d)
		}
	}
	if d := ro.Decide("GET", "/Admin/", nil); d.Allowed {
		t.Errorf("GET /Admin/ passed deny_rules /admin: %+v", d)
	}
	if d := ro.Decide("POST", "/x", nil); d.Hint != "access: read-write" {
		t.Errorf("hint %q", d.Hint)
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, c := range []struct {
		access string
		rules  []Rule
	}{
		{"readonly", nil},
		{ReadOnly, []Rule{{Method: "GET"}}},
		{"", []Rule{{Method: "get"}}},
		{"", []Rule{{Method: "BREW"}}},
		{"", []Rule{{Path: "x"}}},
		{"", []Rule{{Path: "/a/**x"}}},
		{"", []Rule{{Path: "/a/../b"}}},
		{"", []Rule{{Path: "/a;b"}}},
		{"", []Rule{{Path: "/a//b"}}},
		{"", []Rule{{Query: map[string][]string{"": {"x"}}}}},
		{"", []Rule{{Query: map[string][]string{"x": nil}}}},
	} {
		if _, err := Compile(c.access, c.rules, nil); err == nil {
			t.Errorf("Compile(%q, %+v) accepted", c.access, c.rules)
		}
	}
}

func TestCanonicalPath(t *testing.T) {
	for in, want := range map[string]string{"/": "/", "/a/b": "/a/b", "/a/b/": "/a/b/", "/a%20b": "/a b", "/%41": "/A"} {
		if got, err := CanonicalPath(in); err != nil || got != want {
			t.Errorf("CanonicalPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "/a/../b", "/a/./b", "/a/%2e%2e/b", "/a//b", "/a%2fb", "/a%2Fb", "/a%5cb", "/a\\b", "/a%00", "/a;b", "/a%3bb", "/%zz", "/.."} {
		if got, err := CanonicalPath(in); err == nil {
			t.Errorf("CanonicalPath(%q) = %q, want a refusal", in, got)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		g, s string
		want bool
	}{{"*", "", true}, {"a*", "abc", true}, {"*c", "abc", true}, {"a*c", "ac", true}, {"a*c", "ab", false}, {"a?c", "abc", false}, {"[a]", "a", false}, {"**", "x", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}} {
		if got := globMatch(c.g, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.g, c.s, got)
		}
	}
}

// TestWildcardIsLinear: matching takes at most len(pattern)·len(input)
// element comparisons, whatever the input. The recursive matcher it
// replaced tried every split per star: {GET /d/*a*b} against a 30 KB
// segment took ~5 s of a host CPU (the attack review, egress).
func TestWildcardIsLinear(t *testing.T) {
	count := func(pat, s []byte) (bool, int) {
		n := 0
		ok := wildcard(pat, s, func(c byte) bool { return c == '*' }, func(p, c byte) bool { n++; return p == c })
		return ok, n
	}
	for _, pat := range []string{"*a*b", "*a*a*b", "*a*a*a*a*b"} {
		s := []byte(strings.Repeat("a", 3000))
		ok, n := count([]byte(pat), s)
		if ok || n > len(pat)*len(s) {
			t.Errorf("%q against 3000 a: matched %v in %d comparisons, want no match in at most %d", pat, ok, n, len(pat)*len(s))
		}
	}
	pat := []string{"**", "a", "**", "a", "**", "b"}
	segs := strings.Split(strings.Repeat("a/", 2000)+"y", "/")
	n := 0
	ok := wildcard(pat, segs, func(p string) bool { return p == "**" }, func(p, s string) bool { n++; return globMatch(p, s) })
	if ok || n > len(pat)*len(segs) {
		t.Errorf("/**/a/**/a/**/b against 2000 segments: matched %v in %d comparisons, want no match in at most %d", ok, n, len(pat)*len(segs))
	}
	for _, c := range []struct {
		pat, s string
		want   bool
	}{{"*a*b", "xaxb", true}, {"*a*b", "xbxa", false}, {"a*", "a", true}, {"*", "", true}, {"", "x", false}, {"**", "", true}} {
		if ok, _ := count([]byte(c.pat), []byte(c.s)); ok != c.want {
			t.Errorf("%q ~ %q = %v", c.pat, c.s, ok)
		}
	}
}
