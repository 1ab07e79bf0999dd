// Package l7 decides HTTP requests against an allow entry's L7 rules: a
// method preset (access), an allow list of {method, path glob, query
// globs} and deny rules that win over both. It is the one copy of the
// rules' syntax: policy validation reports its errors with the file's
// positions, the egress proxy compiles and applies them.
package l7

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Access presets (OpenShell's access values): read-only is GET, HEAD and
// OPTIONS (RFC 9110 §9.2.1 safe methods less TRACE); read-write adds
// POST, PUT and PATCH; full is every method. Empty means full.
const (
	ReadOnly  = "read-only"
	ReadWrite = "read-write"
	Full      = "full"
)

var presets = map[string]map[string]bool{
	ReadOnly:  {"GET": true, "HEAD": true, "OPTIONS": true},
	ReadWrite: {"GET": true, "HEAD": true, "OPTIONS": true, "POST": true, "PUT": true, "PATCH": true},
}

// methods are RFC 9110 §9's and PATCH (RFC 5789).
var methods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true}

// Rule is one request pattern (policy.HTTPRule).
type Rule struct {
	Method string
	Path   string
	Query  map[string][]string
}

// CheckAccess says why a is not an access preset ("" is allowed: full).
func CheckAccess(a string) error {
	switch a {
	case "", ReadOnly, ReadWrite, Full:
		return nil
	}
	return fmt.Errorf("access %q is not read-only, read-write or full", a)
}

// CheckMethod says why m is not a method a rule may name: "*" (or empty)
// for any, else an RFC 9110 method or PATCH, in upper case (methods are
// case-sensitive, RFC 9110 §9.1).
func CheckMethod(m string) error {
	if m == "" || m == "*" || methods[m] {
		return nil
	}
	if methods[strings.ToUpper(m)] {
		return fmt.Errorf("method %q must be written %q (methods are case-sensitive)", m, strings.ToUpper(m))
	}
	return fmt.Errorf("unknown method %q (want one of CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, TRACE, or *)", m)
}

// CheckPath says why g is not a path glob: it starts with "/", has no
// query or fragment ('?', '#'), no percent-escapes (write the decoded
// path), no "." or ".." segments and no empty segment but a trailing one;
// "**" is a whole segment. Empty means any path.
func CheckPath(g string) error {
	if g == "" {
		return nil
	}
	switch {
	case !strings.HasPrefix(g, "/"):
		return fmt.Errorf("path %q does not start with /", g)
	case strings.ContainsAny(g, "?#"):
		return fmt.Errorf("path %q has a query or fragment: match query parameters with query", g)
	case strings.Contains(g, "%"):
		return fmt.Errorf("path %q has a percent-escape: write the path decoded (requests are matched decoded)", g)
	case strings.ContainsAny(g, "\\\x00;"):
		return fmt.Errorf("path %q has a backslash, ';' or NUL (requests with one are refused)", g)
	}
	segs := strings.Split(g[1:], "/")
	for i, s := range segs {
		switch {
		case s == "" && i < len(segs)-1:
			return fmt.Errorf("path %q has an empty segment (//)", g)
		case s == "." || s == "..":
			return fmt.Errorf("path %q has a %q segment (requests with one are refused)", g, s)
		case strings.Contains(s, "**") && s != "**":
			return fmt.Errorf("path %q: ** must be a whole segment (/a/**/b); * matches within one", g)
		}
	}
	return nil
}

// CheckQuery says why a query matcher is not one: a parameter name and
// at least one glob.
func CheckQuery(name string, globs []string) error {
	if name == "" {
		return errors.New("a query matcher needs a parameter name")
	}
	if len(globs) == 0 {
		return fmt.Errorf("query %q has no patterns", name)
	}
	return nil
}

// Set is a compiled allow entry's L7 rules.
type Set struct {
	access string
	rules  []compiled
	deny   []compiled
}

type queryMatch struct {
	name  string
	globs []string
}

type compiled struct {
	method string
	path   []string     // segments; nil: any path
	query  []queryMatch // sorted by name
	text   string
}

// Compile checks and compiles an entry's rules: access and rules together
// are refused (say one or the other).
func Compile(access string, rules, deny []Rule) (*Set, error) {
	if err := CheckAccess(access); err != nil {
		return nil, err
	}
	if access != "" && len(rules) > 0 {
		return nil, errors.New("access and rules are two ways to say what may pass: use one")
	}
	s := &Set{access: access}
	for _, l := range []struct {
		name string
		in   []Rule
		out  *[]compiled
	}{{"rules", rules, &s.rules}, {"deny_rules", deny, &s.deny}} {
		for i, r := range l.in {
			c, err := compile(r)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", l.name, i, err)
			}
			if l.name == "deny_rules" { // see Decide
				c.path = foldPath(c.path)
				for i := range c.query {
					c.query[i].name = fold(c.query[i].name)
				}
			}
			c.text = fmt.Sprintf("%s[%d] %s", l.name, i, c.text)
			*l.out = append(*l.out, c)
		}
	}
	return s, nil
}

func compile(r Rule) (compiled, error) {
	if err := CheckMethod(r.Method); err != nil {
		return compiled{}, err
	}
	if err := CheckPath(r.Path); err != nil {
		return compiled{}, err
	}
	c := compiled{method: r.Method}
	if c.method == "" {
		c.method = "*"
	}
	if r.Path != "" {
		c.path = strings.Split(r.Path[1:], "/")
	}
	names := make([]string, 0, len(r.Query))
	for k := range r.Query {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := CheckQuery(k, r.Query[k]); err != nil {
			return compiled{}, err
		}
		c.query = append(c.query, queryMatch{k, r.Query[k]})
	}
	c.text = c.method + " " + cmp(r.Path, "/**")
	if len(names) > 0 {
		c.text += "?" + strings.Join(names, "&")
	}
	return c, nil
}

// foldPath lowercases a deny rule's path segments and drops a trailing
// empty one (Decide).
func foldPath(segs []string) []string {
	if segs == nil {
		return nil
	}
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		out = append(out, fold(s))
	}
	if len(out) > 1 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Decision is the outcome for one request: Rule names the rule that
// allowed or denied it ("deny_rules[0] DELETE /**", "access read-only",
// "rules[1] GET /repos/*"); Reason says why a denied request was.
type Decision struct {
	Allowed bool
	Rule    string
	Reason  string
	// Hint, for a denial, is the change to the entry that would allow
	// the request ("remove deny_rules[0] ...", "add {method: POST, path:
	// /x} to rules", "access: full").
	Hint string
}

// Decide applies the set to a request: path is its decoded, canonical
// path (CanonicalPath), query its parameters.
//
// Deny rules match more than they say, allow rules exactly: a deny rule's
// method, path and query names compare without case (upper-cased, then
// lower-cased: "ſ" is "s", as Java's equalsIgnoreCase and .NET read it) and a
// trailing "/" is ignored, so a server that reads /ADMIN/ as /admin
// (IIS, many frameworks) or "delete" as DELETE is not a way around one;
// and a deny rule's query matcher holds when any value of the parameter
// matches (?force=no&force=true is denied by {force: "true"}), where an
// allow rule's needs every value to.
func (s *Set) Decide(method, path string, query url.Values) Decision {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(s.deny) > 0 {
		folded := strings.Split(strings.TrimPrefix(strings.TrimSuffix(fold(path), "/"), "/"), "/")
		fq := url.Values{}
		for k, v := range query {
			fq[fold(k)] = append(fq[fold(k)], v...)
		}
		for _, c := range s.deny {
			if c.match(strings.ToUpper(method), folded, fq, true) {
				return Decision{Rule: c.text, Reason: "denied by " + c.text, Hint: "remove " + c.text}
			}
		}
	}
	if len(s.rules) > 0 {
		for _, c := range s.rules {
			if c.match(method, segs, query, false) {
				return Decision{Allowed: true, Rule: c.text}
			}
		}
		return Decision{Reason: "no rule allows " + method + " " + path,
			Hint: "add {method: " + method + ", path: " + strconvQuoteIfNeeded(path) + "} to rules"}
	}
	if m, ok := presets[s.access]; ok && !m[method] {
		want := Full
		if presets[ReadWrite][method] {
			want = ReadWrite
		}
		return Decision{Rule: "access " + s.access, Reason: "access " + s.access + " does not allow " + method, Hint: "access: " + want}
	}
	return Decision{Allowed: true, Rule: "access " + cmp(s.access, Full)}
}

// match reports whether the request matches c: its method, its path
// segments and, for each query matcher, the parameter's values — every
// one of them, or with anyValue (deny rules) at least one.
func (c *compiled) match(method string, segs []string, query url.Values, anyValue bool) bool {
	if c.method != "*" && c.method != method {
		return false
	}
	if c.path != nil && !matchSegs(c.path, segs) {
		return false
	}
	for _, q := range c.query {
		vals := query[q.name]
		hits := 0
		for _, v := range vals {
			if anyGlob(q.globs, v) {
				hits++
			}
		}
		if len(vals) == 0 || anyValue && hits == 0 || !anyValue && hits < len(vals) {
			return false
		}
	}
	return true
}

// fold is s lowercased after uppercasing, so that characters whose upper
// case is ASCII ("ſ", the Kelvin sign) fold as servers that compare
// upper-cased strings see them.
func fold(s string) string { return strings.ToLower(strings.ToUpper(s)) }

func anyGlob(globs []string, v string) bool {
	for _, g := range globs {
		if globMatch(g, v) {
			return true
		}
	}
	return false
}

// MatchSegments reports whether segs match the glob segments pat: a "**"
// element matches any number of segments (zero too), any other element
// exactly one, as a glob in which '*' is any run of characters and every
// other character itself. It is the one copy of the rule for a rule's
// path glob and for the policy's consent folder globs (policy
// consentcheck.go), in at most len(pat)*len(segs) segment matches.
func MatchSegments(pat, segs []string) bool { return matchSegs(pat, segs) }

// matchSegs matches path segments against glob segments, where "**"
// matches any number of segments and any other glob exactly one.
func matchSegs(pat, segs []string) bool {
	return wildcard(pat, segs, func(p string) bool { return p == "**" }, globMatch)
}

// globMatch matches s against g, where '*' is any run of characters and
// every other character is itself (path.Match would give '?', '[' and
// '\' meanings a policy author does not expect in a URL).
func globMatch(g, s string) bool {
	return wildcard([]byte(g), []byte(s), func(c byte) bool { return c == '*' }, func(p, c byte) bool { return p == c })
}

// wildcard matches s against pat, where an element that is star matches
// any run of elements and any other matches one element when one says
// so. It backtracks only to the last star seen, so it takes at most
// len(pat)*len(s) steps whatever the input (a recursive matcher's cost
// grew as a power of the stars: one request could pin a host CPU).
func wildcard[T any](pat, s []T, star func(T) bool, one func(T, T) bool) bool {
	pi, si, last, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(pat) && star(pat[pi]):
			last, mark = pi, si
			pi++
		case pi < len(pat) && one(pat[pi], s[si]):
			pi++
			si++
		case last >= 0:
			pi, mark = last+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(pat) && star(pat[pi]) {
		pi++
	}
	return pi == len(pat)
}

// CanonicalPath decodes a request's escaped path and refuses the forms
// whose meaning a server may read differently from the rules: not
// starting with "/", an encoded '/' or '\' (%2F, %5C), a backslash, NUL or
// other control byte, a ';' (Tomcat and Spring read /admin;x as /admin),
// a "." or ".." segment, or an empty segment. The request goes upstream as
// sent; its rules were decided on this path.
func CanonicalPath(escaped string) (string, error) {
	if !strings.HasPrefix(escaped, "/") {
		return "", fmt.Errorf("path %q does not start with /", escaped)
	}
	low := strings.ToLower(escaped)
	if strings.Contains(low, "%2f") || strings.Contains(low, "%5c") {
		return "", errors.New("path has an encoded / or \\")
	}
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("path is not validly escaped: %v", err)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' || c == ';' {
			return "", errors.New("path has a backslash, ';' or control byte")
		}
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || s == "" && i < len(segs)-1 {
			return "", errors.New("path has a dot or empty segment")
		}
	}
	if path.Clean(p) != strings.TrimSuffix(p, "/") && p != "/" {
		return "", errors.New("path is not canonical")
	}
	return p, nil
}

// strconvQuoteIfNeeded quotes a path for a YAML flow mapping when it
// holds characters YAML would read otherwise.
func strconvQuoteIfNeeded(p string) string {
	if strings.ContainsAny(p, ",{}[]:#&*!|>'\"%@` ") {
		return strconv.Quote(p)
	}
	return p
}
