package policy

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

// MaxCommandTimeout bounds a source command's timeout: the session waits
// for it before anything starts.
const MaxCommandTimeout = Duration(5 * time.Minute)

// MaxCredentialName bounds a credential's name (it names files of a
// provider's state directory, findings and gateway flags).
const MaxCredentialName = 64

// Placeholder lengths: {random} is DefaultRandom letters and digits,
// {random:N} takes N from MinRandom to MaxRandom (22 is 130 bits).
const (
	DefaultRandom = 32
	MinRandom     = 22
	MaxRandom     = 128
)

var (
	credentialNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`) })
	envNameRE        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
)

// reservedExposeTrees are where an exposed file may not go: kernel
// interfaces, and where corral keeps the sandbox's own files (its CA
// bundle and Java store).
var reservedExposeTrees = []string{"/proc", "/sys", "/dev", "/run/corral"}

// sandboxDirs are directories a sandbox's tree has (or a distro image
// does): an exposed file cannot be bound over one.
var sandboxDirs = []string{"/tmp", "/run", "/var", "/var/tmp", "/var/run", "/home", "/root", "/mnt", "/opt", "/srv", "/media", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64"}

// credentialHopHeaders are headers a credential may not be put in: the
// proxy or its transport sets, strips or reads them (framing, the
// connection, the proxy's own authentication), so a value there would be
// lost or misread.
var credentialHopHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Te", "Trailer", "Proxy-Authorization", "Proxy-Connection", "Proxy-Authenticate"}

// validateCredentials makes the static checks of the credentials section
// (credentials.go), each error at the value it concerns: names, one
// source, what is exposed, the shape, each endpoint's syntax and places,
// and that the network rules let the proxy substitute at every endpoint
// (reachCredential).
func (p *Policy) validateCredentials() []*Error {
	if len(p.Credentials) == 0 {
		return nil
	}
	var errs []*Error
	add := func(e *Error) { errs = append(errs, e) }
	if mode := p.networkMode(); mode != NetworkProxy {
		add(p.errNear("credentials", fmt.Sprintf("credentials need network.mode: proxy (it is %s): the egress proxy is what puts a value in place of its placeholder", mode),
			"set network.mode: proxy and allow each credential's endpoints with tls: inspect"))
	}
	names := map[string]int{}
	envs := map[string]int{}
	files := map[string]int{}
	for i, c := range p.Credentials {
		f := fmt.Sprintf("credentials[%d]", i)
		switch {
		case c.Name == "":
			add(p.errNear(f+".name", "a credential needs a name", "add name: NAME (lower-case letters, digits, '-' and '_'), which findings and the gateway's --credential NAME=... use"))
		case !credentialNameRE().MatchString(c.Name):
			add(p.errAt(f+".name", fmt.Sprintf("credential name %q is not lower-case letters, digits, '-' and '_' starting with a letter or digit", c.Name), "write a name such as openai or github-token"))
		case len(c.Name) > MaxCredentialName:
			add(p.errAt(f+".name", fmt.Sprintf("credential name is %d bytes long, more than %d", len(c.Name), MaxCredentialName), "write a shorter name"))
		default:
			if k, dup := names[c.Name]; dup {
				add(p.errAt(f+".name", fmt.Sprintf("credentials[%d] is named %q too", k, c.Name), "give each credential its own name"))
			} else {
				names[c.Name] = i
			}
		}
		errs = append(errs, p.validateSource(f+".source", c.Source)...)
		errs = append(errs, p.validateExpose(f+".expose", c, envs, files, i)...)
		if c.Shape != "" {
			if _, _, _, msg := parseShape(c.Shape); msg != "" {
				add(p.errAt(f+".shape", msg, `write literal letters, digits, '.', '_' or '-' around one {random} (32 characters) or {random:N} (N from 22 to 128), such as "sk-{random}"`))
			}
		}
		switch c.OnMismatch {
		case "", MismatchDeny, MismatchForward:
		default:
			add(p.errAt(f+".on_mismatch", fmt.Sprintf("on_mismatch %q is not deny or forward", c.OnMismatch), "write deny (refuse a request carrying the placeholder where it is not substituted; the default) or forward (send it on as it is)"))
		}
		if len(c.Endpoints) == 0 {
			add(p.errNear(f+".endpoints", fmt.Sprintf("credential %q has no endpoints: its value could go nowhere", c.Name), "list where it may go: endpoints: [{host: api.example.com}]"))
		}
		for j, e := range c.Endpoints {
			ef := fmt.Sprintf("%s.endpoints[%d]", f, j)
			errs = append(errs, p.validateCredentialEndpoint(ef, e)...)
		}
	}
	return errs
}

// errNear is errAt positioned at field or, when field is not written (a
// missing value), at its nearest written ancestor.
func (p *Policy) errNear(field, msg, hint string) *Error {
	e := &Error{File: p.file, Field: field, Msg: msg, Hint: hint}
	if pos, ok := p.nearest(field); ok {
		e.Line, e.Column = pos.line, pos.col
	}
	return e
}

// written reports whether the policy file sets field.
func (p *Policy) written(field string) bool {
	_, ok := p.pos[field]
	return ok
}

func (p *Policy) validateSource(f string, s CredentialSource) []*Error {
	var errs []*Error
	add := func(field, msg, hint string) { errs = append(errs, p.errAt(field, msg, hint)) }
	var given []string
	if s.Env != "" || p.written(f+".env") {
		given = append(given, "env")
	}
	if s.File != "" || p.written(f+".file") {
		given = append(given, "file")
	}
	command := len(s.Command) > 0 || p.written(f+".command")
	if command {
		given = append(given, "command")
	}
	if s.Stored {
		given = append(given, "stored")
	}
	switch len(given) {
	case 0:
		errs = append(errs, p.errNear(f, "the credential has no source", "write source: {env: NAME}, {file: PATH}, {command: [PROGRAM, ARG, ...]} or {stored: true}"))
	case 1:
	default:
		add(f+"."+given[1], fmt.Sprintf("source has both %s and %s: a credential is read from one place", given[0], given[1]), "keep one of them")
	}
	if slices.Contains(given, "env") {
		if !envNameRE().MatchString(s.Env) {
			add(f+".env", fmt.Sprintf("%q is not an environment variable name", s.Env), "write a name such as OPENAI_API_KEY (letters, digits and '_', not starting with a digit)")
		}
	}
	if slices.Contains(given, "file") {
		if msg, hint := p.checkPath(s.File, false); msg != "" {
			add(f+".file", msg, hint)
		}
	}
	if command {
		switch {
		case len(s.Command) == 0:
			add(f+".command", "the command is empty", "write the program and its arguments, such as [gh, auth, token]")
		case s.Command[0] == "":
			add(f+".command[0]", "the command's program is empty", "name the program to run, such as gh")
		}
		for k, a := range s.Command {
			if strings.ContainsRune(a, 0) {
				add(fmt.Sprintf("%s.command[%d]", f, k), "argument contains a NUL byte", "remove the NUL byte")
			}
		}
	}
	timeout := s.Timeout != 0 || p.written(f+".timeout")
	switch {
	case timeout && !command:
		add(f+".timeout", "timeout applies only to a command source", "remove timeout, or read the value with command: [...]")
	case timeout && s.Timeout <= 0:
		add(f+".timeout", "the command's timeout must be greater than 0", fmt.Sprintf("write a duration such as 5s, or leave it out for %s", DefaultCommandTimeout))
	case timeout && s.Timeout > MaxCommandTimeout:
		add(f+".timeout", fmt.Sprintf("timeout %s is longer than %s: nothing starts until the command ends", s.Timeout, MaxCommandTimeout), "write a shorter duration, such as 10s")
	}
	return errs
}

// validateExpose checks what credential i shows the sandbox; envs and
// files record which credential exposes each name, to refuse a second.
func (p *Policy) validateExpose(f string, c Credential, envs, files map[string]int, i int) []*Error {
	var errs []*Error
	add := func(field, msg, hint string) { errs = append(errs, p.errAt(field, msg, hint)) }
	x := c.Expose
	envGiven, fileGiven := x.Env != "" || p.written(f+".env"), x.File != "" || p.written(f+".file")
	if !envGiven && !fileGiven {
		errs = append(errs, p.errNear(f, fmt.Sprintf("credential %q exposes nothing: the sandbox would have no placeholder to send", c.Name), "write expose: {env: NAME} and/or {file: /run/secrets/"+c.Name+"}"))
	}
	if envGiven {
		ef := f + ".env"
		switch {
		case !envNameRE().MatchString(x.Env):
			add(ef, fmt.Sprintf("%q is not an environment variable name", x.Env), "write a name such as OPENAI_API_KEY (letters, digits and '_', not starting with a digit)")
		case x.Env == "HOME" || x.Env == "PATH":
			add(ef, x.Env+" is the sandbox's own", "expose the placeholder under the name the workload's tool reads, such as GH_TOKEN")
		default:
			if _, set := p.Process.Env.Set[x.Env]; set {
				add(ef, fmt.Sprintf("process.env.set sets %s too: the sandbox's %s is this credential's placeholder", x.Env, x.Env), "remove "+x.Env+" from process.env.set")
			}
			if k, dup := envs[x.Env]; dup {
				add(ef, fmt.Sprintf("credentials[%d] exposes %s too", k, x.Env), "expose each credential under its own variable")
			} else {
				envs[x.Env] = i
			}
		}
	}
	if fileGiven {
		ff := f + ".file"
		if msg, hint := checkExposeFile(x.File); msg != "" {
			add(ff, msg, hint)
		} else if k, dup := files[x.File]; dup {
			add(ff, fmt.Sprintf("credentials[%d] exposes %s too", k, x.File), "expose each credential in its own file")
		} else {
			files[x.File] = i
		}
	}
	return errs
}

// checkExposeFile says what is wrong with expose.file s, a path inside the
// sandbox: absolute or "~/...", clean, a file (not / or ~), not under
// reservedExposeTrees. Being outside every grant is Resolve's check.
func checkExposeFile(s string) (msg, hint string) {
	const how = "write an absolute path outside every grant, such as /run/secrets/NAME"
	rest := s
	switch {
	case s == "":
		return "empty path", how
	case strings.ContainsRune(s, 0):
		return "path contains a NUL byte", "remove the NUL byte"
	case s == "~" || s == "/":
		return fmt.Sprintf("%q names a directory, not a file", s), how
	case strings.HasPrefix(s, "~/"):
		rest = s[1:]
	case strings.HasPrefix(s, "{workdir}"):
		return fmt.Sprintf("%q is in the working directory, which is a grant: the file is made in the sandbox's own tree", s), how
	case strings.HasPrefix(s, "~"):
		return fmt.Sprintf("%q: ~user is not supported", s), "write ~/... (the sandbox's home) or an absolute path"
	case !strings.HasPrefix(s, "/"):
		return fmt.Sprintf("relative path %q", s), how
	}
	if c := path.Clean(rest); c != rest {
		return fmt.Sprintf("path %q is not clean (no \"..\", \".\", \"//\" or trailing \"/\")", s), "write " + strconv.Quote(strings.TrimSuffix(s, rest)+c)
	}
	if slices.Contains(sandboxDirs, s) {
		return fmt.Sprintf("%q names a directory the sandbox has, not a file", s), how
	}
	for _, d := range reservedExposeTrees {
		if rest == s && Within(s, d) {
			return fmt.Sprintf("%s is under %s, which is not the workload's", s, d), how
		}
	}
	return "", ""
}

// parseShape splits a placeholder shape into the literal text around its
// one {random} or {random:N} and N, or says what is wrong with it.
func parseShape(s string) (prefix string, n int, suffix string, msg string) {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return "", 0, "", fmt.Sprintf("shape %q has no {random}", s)
	}
	j := strings.IndexByte(s[i:], '}')
	if j < 0 {
		return "", 0, "", fmt.Sprintf("shape %q has a '{' without '}'", s)
	}
	token := s[i : i+j+1]
	prefix, suffix = s[:i], s[i+j+1:]
	switch {
	case token == "{random}":
		n = DefaultRandom
	case strings.HasPrefix(token, "{random:"):
		v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(token, "{random:"), "}"))
		if err != nil || v < MinRandom || v > MaxRandom {
			return "", 0, "", fmt.Sprintf("shape %q: %s needs N from %d to %d", s, token, MinRandom, MaxRandom)
		}
		n = v
	default:
		return "", 0, "", fmt.Sprintf("shape %q: %s is not {random} or {random:N}", s, token)
	}
	if strings.ContainsAny(suffix, "{}") || strings.ContainsRune(prefix, '}') {
		return "", 0, "", fmt.Sprintf("shape %q has more than one {random}", s)
	}
	for _, lit := range []string{prefix, suffix} {
		for k := 0; k < len(lit); k++ {
			if !shapeChar(lit[k]) {
				return "", 0, "", fmt.Sprintf("shape %q: %q is not a letter, digit, '.', '_' or '-'", s, string(rune(lit[k])))
			}
		}
	}
	return prefix, n, suffix, ""
}

// shapeChar reports whether c may be a placeholder's: ASCII letters,
// digits, '.', '_' and '-' are a token in every place (header, Basic
// half, query value, environment) and need no escaping.
func shapeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

func (p *Policy) validateCredentialEndpoint(ef string, e CredentialEndpoint) []*Error {
	var errs []*Error
	add := func(field, msg, hint string) { errs = append(errs, p.errAt(field, msg, hint)) }
	hostOK := false
	if msg, hint := checkCredentialHost(e.Host); msg != "" {
		errs = append(errs, p.errNear(ef+".host", msg, hint))
	} else {
		hostOK = true
	}
	portsOK := true
	for k, port := range e.Ports {
		pf := fmt.Sprintf("%s.ports[%d]", ef, k)
		switch {
		case port < 1 || port > 65535:
			add(pf, fmt.Sprintf("port %d is outside 1-65535", port), "use a TCP port number")
			portsOK = false
		case port == 80:
			add(pf, "port 80 is plain HTTP: the value would cross the network readable, and the proxy substitutes only in TLS it inspects", "bind the credential to the host's TLS port (443)")
			portsOK = false
		}
	}
	if e.Path != "" {
		if msg := checkBindingPath(e.Path); msg != "" {
			add(ef+".path", msg, `write a path prefix such as /v1/ (whole segments: it matches /v1 and /v1/x, not /v10), decoded, without query or globs`)
		}
	}
	if e.Header != "" || p.written(ef+".header") {
		if msg, hint := checkHeaderPlace(e.Header); msg != "" {
			add(ef+".header", msg, hint)
		}
	}
	switch e.Basic {
	case "", "user", "password":
	default:
		add(ef+".basic", fmt.Sprintf("basic %q is not user or password", e.Basic), "write basic: password (git over https sends the token as the password) or basic: user")
	}
	if e.Query != "" || p.written(ef+".query") {
		if e.Query == "" || strings.IndexFunc(e.Query, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			add(ef+".query", fmt.Sprintf("query parameter name %q is empty or has a control character", e.Query), "name the parameter that carries the key, such as api_key")
		}
	}
	if e.Body != nil && (e.Body.Max < 0 || e.Body.Max > MaxBodyMax) {
		add(ef+".body.max", fmt.Sprintf("body max %s is outside 0-%s", e.Body.Max, MaxBodyMax), fmt.Sprintf("bodies are read whole to substitute in them: write at most %s, or leave max out for %s", MaxBodyMax, DefaultBodyMax))
	}
	if hostOK && portsOK && p.Network.Mode == NetworkProxy {
		if e := p.reachCredential(ef, e); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// checkCredentialHost says what is wrong with an endpoint's host: it is
// one exact name or IP literal, in the canonical form the proxy compares
// (lower case, no trailing dot, an IPv4 address unmapped), so that a
// binding names exactly the hosts it means.
func checkCredentialHost(host string) (msg, hint string) {
	switch {
	case host == "":
		return "empty host", "name the host the value goes to, such as api.example.com"
	case strings.Contains(host, "*"):
		return fmt.Sprintf("%q: a credential's host is exact, without wildcards", host), "list each host the value may go to"
	case strings.Contains(host, "/"):
		return fmt.Sprintf("%q: a credential's host is exact, not a CIDR", host), "list each host or address the value may go to"
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return fmt.Sprintf("%q has a zone (%%%s): a rule names addresses, not interfaces", host, a.Zone()), "write the address without the %zone"
		}
		if c := a.Unmap().String(); c != host {
			return fmt.Sprintf("IP address %q is not in canonical form", host), "write " + c
		}
		return "", ""
	}
	if l := strings.TrimSuffix(asciiLower(host), "."); l != host {
		return fmt.Sprintf("host %q is not in canonical form (lower case, no trailing dot)", host), "write " + l
	}
	if why, hint := checkName(host); why != "" {
		return fmt.Sprintf("%q is not a valid host name: %s", host, why), hint
	}
	return "", ""
}

// checkBindingPath says what is wrong with an endpoint's path: it is a
// path the proxy's canonical request paths can equal or start with
// (egress/l7's rule path syntax without globs, which l7.CanonicalPath
// accepts as it is).
func checkBindingPath(p string) string {
	if err := l7.CheckPath(p); err != nil {
		return err.Error()
	}
	if strings.Contains(p, "*") {
		return fmt.Sprintf("path %q has a '*': an endpoint's path is a prefix, not a glob", p)
	}
	if _, err := l7.CanonicalPath(p); err != nil { // control bytes, which CheckPath lets by
		return err.Error()
	}
	return ""
}

// checkHeaderPlace says what is wrong with an endpoint's header place,
// "Name: template": an RFC 9110 field name the proxy forwards as it is
// (not Host, framing, hop-by-hop or proxy headers) and a template of
// visible text holding "{}" once.
func checkHeaderPlace(h string) (msg, hint string) {
	const how = `write "Name: template" with "{}" where the value goes, such as "Authorization: Bearer {}" or "X-Api-Key: {}"`
	name, tmpl, ok := strings.Cut(h, ":")
	switch {
	case !ok:
		return fmt.Sprintf("header %q has no ':' between the name and the template", h), how
	case name == "" || strings.IndexFunc(name, func(r rune) bool { return r > 0x7e || !isTokenChar(byte(r)) }) >= 0:
		return fmt.Sprintf("header name %q is not an HTTP field name", name), how
	case slices.ContainsFunc(credentialHopHeaders, func(s string) bool { return strings.EqualFold(s, name) }):
		return fmt.Sprintf("header %s is the proxy's or the connection's, not a place for a credential", name), how
	}
	tmpl = strings.Trim(tmpl, " \t")
	if n := strings.Count(tmpl, "{}"); n != 1 {
		return fmt.Sprintf("header template %q holds \"{}\" %d times, not once", tmpl, n), how
	}
	if strings.IndexFunc(tmpl, func(r rune) bool { return r != ' ' && r != '\t' && (r < 0x21 || r > 0x7e) }) >= 0 {
		return fmt.Sprintf("header template %q has a control or non-ASCII character", tmpl), how
	}
	return "", ""
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// reachCredential checks that the network rules let the proxy substitute
// at endpoint e (field ef; its host and ports valid): for every port, no
// network.deny entry matches the host (nor, for an IP deny entry, its
// network.hosts address), and an inspected network.allow entry admits it,
// as the proxy decides (egress checkPolicy: deny first, then the matching
// allow entries, inspected ones first). It returns the first problem, with
// the line that fixes it.
func (p *Policy) reachCredential(ef string, e CredentialEndpoint) *Error {
	n := &p.Network
	ports := e.Ports
	if len(ports) == 0 {
		ports = []int{443}
	}
	at := func(k int) string { // a port's problem at the port, when written
		if pf := fmt.Sprintf("%s.ports[%d]", ef, k); len(e.Ports) > 0 && p.written(pf) {
			return pf
		}
		return ef + ".host"
	}
	mapped, hasAddr := netip.Addr{}, false
	for name, v := range n.Hosts {
		if strings.TrimSuffix(asciiLower(name), ".") == e.Host {
			mapped, hasAddr = parseAddrOK(v)
		}
	}
	for k, port := range ports {
		hp := hostPort(e.Host, port)
		for di, d := range n.Deny {
			if !ports80443(d.Ports, port, true) {
				continue
			}
			if ruleMatchesHost(d.Host, e.Host) {
				return p.errAt(at(k), fmt.Sprintf("network.deny[%d] (%s) refuses %s", di, d.Host, hp), fmt.Sprintf("remove network.deny[%d], or bind the credential to another host", di))
			}
			if hasAddr && ruleMatchesHost(d.Host, mapped.String()) {
				return p.errAt(at(k), fmt.Sprintf("network.hosts maps %s to %s, which network.deny[%d] (%s) refuses", e.Host, mapped, di, d.Host), fmt.Sprintf("remove network.deny[%d], or map %s elsewhere", di, e.Host))
			}
		}
		first, other := -1, -1 // the first allow entry matching host:port, and one matching the host on other ports
		inspected := false
		for ai, a := range n.Allow {
			if !ruleMatchesHost(a.Host, e.Host) {
				continue
			}
			if !ports80443(a.Ports, port, false) {
				if other < 0 {
					other = ai
				}
				continue
			}
			if a.Inspected() {
				inspected = true
				break
			}
			if first < 0 {
				first = ai
			}
		}
		switch {
		case inspected:
			continue
		case first >= 0:
			a := n.Allow[first]
			why := "admits it uninspected (no tls: inspect and no L7 rules): the tunnel is spliced unread"
			if a.TLS == TLSPassthrough {
				why = "has tls: passthrough: the tunnel is spliced unread"
			}
			hint := fmt.Sprintf("add tls: inspect to network.allow[%d]", first)
			if a.TLS == TLSPassthrough {
				hint = fmt.Sprintf("change network.allow[%d] to tls: inspect", first)
			}
			if a.Host != e.Host {
				hint = fmt.Sprintf("add %s to network.allow, or %s (which inspects every host it matches)", allowLine(e.Host, port), hint)
			}
			return p.errAt(at(k), fmt.Sprintf("the proxy could never put the value in requests to %s: network.allow[%d] (%s) %s", hp, first, a.Host, why), hint)
		case other >= 0:
			a := n.Allow[other]
			on := "80 and 443"
			if len(a.Ports) > 0 {
				on = strings.Trim(strings.ReplaceAll(fmt.Sprint(a.Ports), " ", ", "), "[]")
			}
			hint := "add " + allowLine(e.Host, port) + " to network.allow"
			if a.Host == e.Host {
				hint = fmt.Sprintf("add %d to network.allow[%d].ports", port, other)
				if !a.Inspected() {
					hint += ", with tls: inspect"
				}
			}
			return p.errAt(at(k), fmt.Sprintf("network.allow[%d] (%s) admits %s on ports %s, not %d", other, a.Host, e.Host, on, port), hint)
		default:
			return p.errAt(ef+".host", fmt.Sprintf("%s is not in network.allow: the proxy would refuse every request to it", hp), "add "+allowLine(e.Host, port)+" to network.allow")
		}
	}
	return nil
}

// allowLine is the network.allow entry that admits host:port inspected.
func allowLine(host string, port int) string {
	s := "{host: " + host + ", tls: inspect"
	if port != 443 {
		s += ", ports: [" + strconv.Itoa(port) + "]"
	}
	if singleLabel(host) {
		s += ", single_label: true"
	}
	return s + "}"
}

// hostPort joins host and port, bracketing an IPv6 address.
func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

func parseAddrOK(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}

// ports80443 reports whether an entry's ports admit port: listed, or,
// when none are, 80 and 443 (allow) or any (anyWhenEmpty: deny).
func ports80443(ports []int, port int, anyWhenEmpty bool) bool {
	if len(ports) == 0 {
		return anyWhenEmpty || port == 80 || port == 443
	}
	return slices.Contains(ports, port)
}

// ruleMatchesHost reports whether a network entry's host (valid by
// checkEndpointHost) matches h, a canonical exact name or IP literal, as
// the egress proxy matches a request's target (egress compileRule and
// matchTarget, which policy cannot import): names compare without case or
// trailing dot, "*." covers exactly one label below, "**." one or more,
// IPs and CIDRs cover IP literals only (an IPv4-mapped address as IPv4).
func ruleMatchesHost(rule, h string) bool {
	r := strings.TrimSuffix(asciiLower(rule), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		a = a.Unmap()
		if strings.Contains(r, "/") {
			pfx, err := netip.ParsePrefix(r)
			if err != nil {
				return false
			}
			pfx = pfx.Masked()
			if pfx.Addr().Is4In6() && pfx.Bits() >= 96 {
				pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
			}
			return pfx.Contains(a)
		}
		b, err := netip.ParseAddr(r)
		return err == nil && b.Unmap() == a
	}
	if rest, ok := strings.CutPrefix(r, "**."); ok {
		return strings.HasSuffix(h, "."+rest)
	}
	if rest, ok := strings.CutPrefix(r, "*."); ok {
		label, ok := strings.CutSuffix(h, "."+rest)
		return ok && label != "" && !strings.Contains(label, ".")
	}
	return r == h
}
