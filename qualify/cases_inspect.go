//go:build linux

package qualify

// Inspected-egress cases: P29 L7 rules over TLS, P32 the interception CA.
// The upstreams are NewOrigin servers (h2 and http/1.1) on loopback with
// a certificate of the case's own test CA, which the policy's
// network.upstream_ca makes the proxy trust; names reach them through the
// hosts map and allow_private. Inside, the client is the binary under
// test (ClientArg): net/http through the sandbox's proxy, verifying with
// the trust the sandbox gives Go programs.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/provider"
)

func init() {
	Register(Case{ID: "P29", Title: "inspected egress, L7", Applies: linuxKernel, Run: runP29})
	Register(Case{ID: "P32", Title: "the interception CA", Applies: linuxKernel, Run: runP32})
}

// inspectOff, when set (tests only), writes P29's and P32's allow entries
// without their L7 rules: nothing is inspected, every tunnel is spliced
// unread (the suite's self-test: both cases must then fail).
var inspectOff bool

// Inspected is one allow entry on a loopback origin: a name, the
// origin's address and port, and its L7 fields (YAML flow-mapping
// members, e.g. `access: read-only`; "" allows the host uninspected).
type Inspected struct {
	Host, IP string
	Port     int
	L7       string
}

// InspectNet renders the network lines (under "network:", indented two
// spaces; the mode is the caller's) that allow hs, map their names to
// their addresses (hosts), let the proxy dial exactly those
// (allow_private IP/32 on the port) and make it trust upstreamCA, a PEM
// file, for them (upstream_ca).
func InspectNet(upstreamCA string, hs ...Inspected) string {
	var b strings.Builder
	b.WriteString("  allow:\n")
	n := Egress{Hosts: map[string]string{}}
	for _, h := range hs {
		fmt.Fprintf(&b, "    - {host: %s, ports: [%d]", strconv.Quote(h.Host), h.Port)
		if h.L7 != "" {
			b.WriteString(", " + h.L7)
		}
		b.WriteString("}\n")
		n.Hosts[h.Host] = h.IP
		ep := Endpoint{h.IP + "/32", []int{h.Port}}
		if !slices.ContainsFunc(n.Private, func(e Endpoint) bool { return e.Host == ep.Host && slices.Equal(e.Ports, ep.Ports) }) {
			n.Private = append(n.Private, ep)
		}
	}
	b.WriteString(n.YAML())
	fmt.Fprintf(&b, "  upstream_ca: %s\n", strconv.Quote(upstreamCA))
	return b.String()
}

// inspectPolicy is a proxy-mode policy allowing hs (on origins of this
// host), with upstream_ca naming the case's test CA (caFile).
func (e *Env) inspectPolicy(r *Result, caFile string, hs ...Inspected) string {
	if inspectOff {
		for i := range hs {
			hs[i].L7 = ""
		}
		e.Check(r, "test hook: interception disabled", "allow entries without access, rules or deny_rules: every tunnel spliced", true, "")
	}
	return e.policyFor(pol{Network: "proxy", NetRules: InspectNet(caFile, hs...)})
}

// testOrigin starts a NewOrigin on ip with a certificate for names from a
// test CA of the case's own, whose PEM it writes to the case dir (the
// policy's upstream_ca).
func (e *Env) testOrigin(ip string, names ...string) (*Upstream, string, error) {
	caFile := filepath.Join(e.Dir, "upstream-ca.pem")
	leaf, err := testcert.Issue(caFile, names...)
	if err != nil {
		return nil, "", err
	}
	u, err := NewOrigin(ip, 0, &leaf)
	return u, caFile, err
}

// clientLine is the shell command running the in-sandbox client (the
// binary under test) with mode and spec.
func (e *Env) clientLine(mode string, spec any) string {
	b, _ := json.Marshal(spec)
	return shq(e.Bin) + " " + ClientArg + " " + mode + " " + shq(string(b))
}

// clientJSON decodes the client's JSON line in a step's text into v.
func clientJSON(s stepOut, v any) error {
	for _, l := range strings.Split(s.Text, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "{") {
			return json.Unmarshal([]byte(l), v)
		}
	}
	return fmt.Errorf("no report from the client: %s", clip(s.Text, 300))
}

// showFetch renders a FetchResult as evidence.
func showFetch(x FetchResult) string {
	s := fmt.Sprintf("status %d %s", x.Status, x.Proto)
	if x.Err != "" {
		s += "; error: " + clip(x.Err, 200)
	}
	if x.Body != "" {
		s += "; body: " + clip(x.Body, 200)
	}
	if x.Issuer != "" {
		s += "; leaf issuer: " + x.Issuer
		if x.Verified {
			s += " (verifies against the sandbox's trust)"
		} else {
			s += " (does not verify: " + clip(x.VerifyErr, 120) + ")"
		}
	}
	return s
}

// sandboxCAName is the subject organisation of Corral's egress CAs.
const sandboxCAName = "O=Corral sandbox"

// P29: access: read-only over TLS — GET, HEAD, OPTIONS pass; other
// methods 403; a rules and deny_rules host; :authority and Host against
// the tunnel's host, over HTTP/2 and HTTP/1.1; the upstream saw only what
// passed.
func runP29(ctx context.Context, e *Env) Result {
	r := newResult()
	o, caFile, err := e.testOrigin("127.0.0.29", "api.allowed.test", "api.rules.test")
	if err != nil {
		failNow(e, &r, "origin", err)
		return r
	}
	defer o.Close()
	p := o.Port
	pol := e.inspectPolicy(&r, caFile,
		Inspected{"api.allowed.test", o.IP, p, "access: read-only"},
		Inspected{"api.rules.test", o.IP, p, `rules: [{method: GET, path: "/v1/public/**"}], deny_rules: [{path: "/v1/public/secret/**"}]`})
	a := "https://" + o.HostPort("api.allowed.test")
	ru := "https://" + o.HostPort("api.rules.test")
	type want struct {
		FetchRequest
		status string // "200", "403", "400|403"
		passes bool   // the upstream must see it
	}
	req := func(label, method, url, host, proto, conn, status string) want {
		return want{FetchRequest{Label: label, Method: method, URL: url, Host: host, Proto: proto, Conn: conn, Body: map[bool]string{true: "body"}[method == "POST" || method == "PUT" || method == "PATCH"]},
			status, status == "200"}
	}
	ws := []want{
		req("h1 GET /", "GET", a+"/", "", "h1", "a1", "200"),
		req("h1 HEAD /", "HEAD", a+"/", "", "h1", "a1", "200"),
		req("h1 OPTIONS /", "OPTIONS", a+"/", "", "h1", "a1", "200"),
		req("h1 POST /", "POST", a+"/", "", "h1", "a1", "403"),
		req("h1 PUT /", "PUT", a+"/", "", "h1", "a1", "403"),
		req("h1 DELETE /", "DELETE", a+"/", "", "h1", "a1", "403"),
		req("h1 PATCH /", "PATCH", a+"/", "", "h1", "a1", "403"),
		req("h1 delete / (lower case)", "delete", a+"/", "", "h1", "a1", "403"),
		req("h2 GET /", "GET", a+"/", "", "h2", "a2", "200"),
		req("h2 POST /", "POST", a+"/", "", "h2", "a2", "403"),
		req("h2 DELETE /", "DELETE", a+"/", "", "h2", "a2", "403"),
		// On the same HTTP/2 connection as the GET: the tunnel and SNI
		// are api.allowed.test's, the stream names another authority.
		req("h2 :authority evil.test (SNI api.allowed.test)", "GET", a+"/", "evil.test:"+strconv.Itoa(p), "h2", "a2", "421"),
		req("h2 :authority api.rules.test (allowed, another tunnel's host)", "GET", a+"/v1/public/x", "api.rules.test:"+strconv.Itoa(p), "h2", "a2", "421"),
		req("h2 :authority api.allowed.test:1 (another port)", "GET", a+"/", "api.allowed.test:1", "h2", "a2", "421"),
		req("h1 Host: evil.test (SNI api.allowed.test)", "GET", a+"/", "evil.test:"+strconv.Itoa(p), "h1", "a3", "421"),
		req("h1 Host: api.rules.test (allowed, another tunnel's host)", "GET", a+"/v1/public/x", "api.rules.test:"+strconv.Itoa(p), "h1", "a4", "421"),
		// The rules host: GET /v1/public/** only, /v1/public/secret/** denied.
		req("rules: GET /v1/public/a", "GET", ru+"/v1/public/a", "", "h1", "r1", "200"),
		req("rules: h2 GET /v1/public/a", "GET", ru+"/v1/public/a", "", "h2", "r2", "200"),
		req("rules: GET /v1/private/a", "GET", ru+"/v1/private/a", "", "h1", "r1", "403"),
		req("rules: h2 GET /v1/private/a", "GET", ru+"/v1/private/a", "", "h2", "r2", "403"),
		req("rules: POST /v1/public/a", "POST", ru+"/v1/public/a", "", "h1", "r1", "403"),
		req("rules: GET /v1/publicity (not a segment)", "GET", ru+"/v1/publicity", "", "h1", "r1", "403"),
		req("deny_rules: GET /v1/public/secret/k", "GET", ru+"/v1/public/secret/k", "", "h1", "r1", "403"),
		req("rules: GET /v1/public/../private/a", "GET", ru+"/v1/public/../private/a", "", "h1", "r1", "400|403"),
		req("rules: GET /v1/public/%2e%2e/private/a", "GET", ru+"/v1/public/%2e%2e/private/a", "", "h1", "r1", "400|403"),
		req("rules: GET /v1/public%2fsecret%2fk", "GET", ru+"/v1/public%2fsecret%2fk", "", "h1", "r1", "400|403"),
		req("rules: GET /v1/public//secret/k", "GET", ru+"/v1/public//secret/k", "", "h1", "r1", "400|403"),
		req("deny_rules: h2 GET /v1/public/./secret/k", "GET", ru+"/v1/public/./secret/k", "", "h2", "r2", "400|403"),
	}
	spec := FetchSpec{Record: true}
	for _, w := range ws {
		spec.Requests = append(spec.Requests, w.FetchRequest)
	}
	out, err := e.Corral(ctx, Run{Policy: pol, Args: e.steps(step{Label: "fetch", Shell: e.clientLine("fetch", spec)})})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(out)
	var rep FetchReport
	err = clientJSON(s["fetch"], &rep)
	e.Check(&r, "run (api.allowed.test access: read-only; api.rules.test rules and deny_rules)", brief(out), err == nil && out.Code == 0 && len(rep.Results) == len(ws),
		fmt.Sprintf("the client did not report every request: %v", err))
	if err != nil {
		return r
	}
	var untrusted []string
	for i, w := range ws {
		if i >= len(rep.Results) {
			break
		}
		x := rep.Results[i]
		st := strconv.Itoa(x.Status)
		ok := strings.Contains("|"+w.status+"|", "|"+st+"|")
		why := fmt.Sprintf("%s: status %d, want %s", w.Label, x.Status, w.status)
		switch {
		case ok && w.Proto == "h2" && x.Proto != "HTTP/2.0":
			ok, why = false, w.Label+": answered over "+x.Proto+", not HTTP/2"
		case ok && w.passes && !strings.HasPrefix(x.Body, "upstream-ok") && w.Method != "HEAD":
			ok, why = false, w.Label+": the body is not the upstream's"
		case ok && !w.passes:
			// The refusal is the proxy's own (the origin answers 200 to
			// everything): its JSON body names the reason.
			var d struct{ Reason, Host string }
			if json.Unmarshal([]byte(x.Body), &d) != nil || d.Reason == "" {
				ok, why = false, w.Label+": the refusal is not the proxy's JSON denial"
			}
		}
		e.Check(&r, w.Label, showFetch(x), ok, why)
		if x.Leaf != "" && (!x.Verified || !strings.Contains(x.Issuer, sandboxCAName)) {
			untrusted = append(untrusted, w.Label)
		}
	}
	e.Check(&r, "TLS: each connection's leaf is the sandbox CA's and verifies against the sandbox's trust", fmt.Sprintf("%d of %d requests otherwise: %q", len(untrusted), len(ws), untrusted),
		len(untrusted) == 0, "a connection was not intercepted by the sandbox's CA, or its leaf does not verify inside")
	// The upstream saw exactly the requests that passed, with the
	// authority of their tunnel.
	var wantLog []string
	for _, w := range ws {
		if w.passes {
			u := strings.TrimPrefix(w.URL, "https://")
			host, path, _ := strings.Cut(u, "/")
			wantLog = append(wantLog, w.Method+" "+host+" /"+path)
		}
	}
	settle()
	got := o.Requests()
	slices.Sort(wantLog)
	slices.Sort(got)
	e.Check(&r, "host: what the upstream served", strings.Join(got, "; "), slices.Equal(got, wantLog),
		"the upstream's log is not exactly the requests that passed ("+strings.Join(wantLog, "; ")+")")
	return r
}

// P32: the CA key is nowhere inside; the CA the sandbox trusts is
// name-constrained to the inspected hosts, so that a leaf forged for any
// other name fails verification; the proxy issues none.
func runP32(ctx context.Context, e *Env) Result {
	r := newResult()
	o, caFile, err := e.testOrigin("127.0.0.32", "api.allowed.test", "api.plain.test")
	if err != nil {
		failNow(e, &r, "origin", err)
		return r
	}
	defer o.Close()
	p := o.Port
	inspected := []string{"api.allowed.test"}
	pol := e.inspectPolicy(&r, caFile, Inspected{"api.allowed.test", o.IP, p, "access: read-only"}, Inspected{"api.plain.test", o.IP, p, ""})
	a := "https://" + o.HostPort("api.allowed.test")
	// Names the CA must not be able to vouch for: another host, the
	// inspected host's parent, a name below it, one that ends in it, the
	// passthrough host, and the origin's addresses.
	forged := []string{"evil.test", "allowed.test", "sub.api.allowed.test", "api.allowed.test.evil.test", "xapi.allowed.test", "api.plain.test", o.IP, "::1"}
	wd := e.TempDir("work")
	attempts := FetchSpec{Record: true, Requests: []FetchRequest{
		{Label: "the passthrough host api.plain.test", URL: "https://" + o.HostPort("api.plain.test") + "/"},
		{Label: "CONNECT evil.test", URL: "https://" + o.HostPort("evil.test") + "/"},
		{Label: "CONNECT the origin's address", URL: "https://" + o.HostPort(o.IP) + "/"},
		{Label: "SNI evil.test in the api.allowed.test tunnel", URL: a + "/", SNI: "evil.test"},
		{Label: "SNI sub.api.allowed.test in the api.allowed.test tunnel", URL: a + "/", SNI: "sub.api.allowed.test"},
	}}
	out, err := e.Corral(ctx, Run{Policy: pol, Workdir: wd, Timeout: 80 * time.Second, Args: e.steps(
		step{Label: "ca", Shell: e.clientLine("ca", CASpec{URL: a + "/"})},
		step{Label: "attempts", Shell: e.clientLine("fetch", attempts)},
	)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(out)
	var rep CAReport
	err = clientJSON(s["ca"], &rep)
	e.Check(&r, "run (api.allowed.test inspected, api.plain.test passthrough)", brief(out), err == nil && out.Code == 0, fmt.Sprintf("the client did not report: %v", err))
	if err != nil {
		return r
	}
	// The key, anywhere the workload can read.
	h := rep.Hunt
	e.Check(&r, "inside: search for the CA's private key", fmt.Sprintf("%d files and %d MiB scanned (environment, /proc/*/{environ,cmdline,fd/*,mem} included; truncated: %v); unreadable: %v; processes visible: %q; memory read of: %q; private keys found: %q",
		h.Files, h.Bytes>>20, h.Truncated, h.Unreadable, h.Procs, h.MemRead, h.Keys), len(h.CAKey) == 0 && h.Files > 0,
		"the CA's private key is readable inside: "+strings.Join(h.CAKey, "; "))
	for _, pr := range h.Procs {
		// The processes that hold a CA key (corral run's supervisor, a
		// service session's, the gateway) must be out of sight.
		_, cmd, _ := strings.Cut(pr, ": ")
		if f := strings.Fields(cmd); len(f) > 1 && filepath.Base(f[0]) == filepath.Base(e.Bin) && slices.Contains([]string{"run", "service", "gateway"}, f[1]) {
			e.Check(&r, "inside: a process that holds the CA", pr, false, "a corral front end (which holds the CA key) is visible inside")
		}
	}
	// The CA the sandbox trusts: the one that issued the inspected
	// host's leaf, found in the trust sources.
	var srcs []string
	bundleHasCA, otherCA := false, false
	for _, ts := range rep.Sources {
		srcs = append(srcs, fmt.Sprintf("%s (%s): %d certs, issuing CA %v, Corral CAs %q %s", ts.Path, strings.Join(ts.Via, ","), ts.Certs, ts.HasCA, ts.Corral, ts.Err))
		if ts.Path == provider.TrustBundlePath && ts.HasCA {
			bundleHasCA = true
		}
		if len(ts.Corral) > 0 && !ts.HasCA || len(ts.Corral) > 1 {
			otherCA = true
		}
	}
	e.Check(&r, "inside: GET "+a+"/ (inspected)", showFetch(rep.Fetch), rep.Fetch.Status == 200 && rep.Fetch.Verified && strings.Contains(rep.Fetch.Issuer, sandboxCAName),
		"the inspected host's leaf is not the sandbox CA's, or does not verify against the sandbox's trust")
	e.Check(&r, "inside: the trust sources", strings.Join(srcs, "; "), bundleHasCA && !otherCA,
		"the sandbox's bundle (/run/corral/ca-bundle.pem) does not hold the CA that issued the leaf, or a source holds another Corral CA")
	var ca *x509.Certificate
	if b, _ := pem.Decode([]byte(rep.CA)); b != nil {
		ca, _ = x509.ParseCertificate(b.Bytes)
	}
	if ca == nil {
		e.Check(&r, "the CA the sandbox trusts", "none found", false, "no trust source inside holds the CA that issued the inspected host's leaf: the name constraints cannot be checked")
	} else {
		checkConstraints(e, &r, ca, inspected, forged)
	}
	// The proxy itself vouches for no other name.
	var at FetchReport
	if err := clientJSON(s["attempts"], &at); err != nil {
		failNow(e, &r, "inside: the attempts", err)
		return r
	}
	for _, x := range at.Results {
		ok := true
		if x.Leaf != "" && ca != nil {
			b, _ := pem.Decode([]byte(x.Leaf))
			if c, err := x509.ParseCertificate(b.Bytes); err == nil && c.CheckSignatureFrom(ca) == nil && !slices.Equal(c.DNSNames, inspected) {
				ok = false
			}
		}
		if ca == nil && strings.Contains(x.Issuer, sandboxCAName) {
			ok = false
		}
		e.Check(&r, "inside: "+x.Label, showFetch(x), ok && !x.Verified, x.Label+": the proxy presented a leaf the sandbox trusts for a name outside the inspected set")
	}
	return r
}

// checkConstraints checks that ca (the CA the sandbox trusts) is a CA
// for TLS servers name-constrained, critically, to exactly the inspected
// names and no IP address; then shows what its key could forge. The key
// never leaves the proxy, so the leaves are signed by a clone: a CA with
// ca's subject, validity, basic constraints and key usage and its name
// constraints extension copied byte for byte, under a key of the case's.
// Verification depends on the CA certificate's content and the
// signature only, so a leaf the clone signs verifies under the clone
// exactly when the same leaf signed with the real key would under ca.
func checkConstraints(e *Env, r *Result, ca *x509.Certificate, inspected, forged []string) {
	var ncExt *pkix.Extension
	for i, x := range ca.Extensions {
		if x.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 30}) {
			ncExt = &ca.Extensions[i]
		}
	}
	var ex []string
	for _, n := range ca.ExcludedIPRanges {
		ex = append(ex, n.String())
	}
	desc := fmt.Sprintf("subject %s; CA %v, path length 0 %v; name constraints: critical %v, permitted DNS %q, excluded DNS %q, permitted IPs %v, excluded IPs %q, permitted email %q, URI %q",
		ca.Subject, ca.IsCA, ca.MaxPathLenZero, ncExt != nil && ncExt.Critical, ca.PermittedDNSDomains, ca.ExcludedDNSDomains, ca.PermittedIPRanges, ex, ca.PermittedEmailAddresses, ca.PermittedURIDomains)
	want := append([]string(nil), inspected...)
	got := append([]string(nil), ca.PermittedDNSDomains...)
	slices.Sort(want)
	slices.Sort(got)
	allIPs := slices.Contains(ex, "0.0.0.0/0") && slices.Contains(ex, "::/0")
	e.Check(r, "host: the CA the sandbox trusts", desc,
		ca.IsCA && ca.MaxPathLenZero && ncExt != nil && ncExt.Critical && slices.Equal(got, want) && len(ca.PermittedIPRanges) == 0 && allIPs,
		"the sandbox's CA is not critically constrained to exactly the inspected hosts ("+strings.Join(want, ", ")+") with every IP address excluded")
	if ncExt == nil {
		return
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		failNow(e, r, "clone key", err)
		return
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: ca.Subject, NotBefore: ca.NotBefore, NotAfter: ca.NotAfter,
		KeyUsage: ca.KeyUsage, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true, ExtraExtensions: []pkix.Extension{*ncExt}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		failNow(e, r, "clone CA", err)
		return
	}
	clone, err := x509.ParseCertificate(der)
	if err != nil {
		failNow(e, r, "clone CA", err)
		return
	}
	pool := x509.NewCertPool()
	pool.AddCert(clone)
	sign := func(name string) error {
		t := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if ip := net.ParseIP(name); ip != nil {
			t.IPAddresses = []net.IP{ip}
		} else {
			t.DNSNames = []string{name}
		}
		ld, err := x509.CreateCertificate(rand.Reader, t, clone, &key.PublicKey, key)
		if err != nil {
			return err
		}
		l, err := x509.ParseCertificate(ld)
		if err != nil {
			return err
		}
		_, err = l.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
		return err
	}
	for _, n := range inspected {
		err := sign(n)
		e.Check(r, "host: control: a leaf for "+n+" under the constraints", fmt.Sprintf("verify: %v", err), err == nil, "a leaf for the inspected host does not verify under the CA's constraints: the clone is not faithful")
	}
	for _, n := range forged {
		err := sign(n)
		e.Check(r, "host: a leaf forged for "+n+" under the constraints", fmt.Sprintf("verify: %v", err), err != nil && strings.Contains(err.Error(), "not authorized to sign for this name"),
			"a leaf for "+n+", outside the inspected set, verifies under the sandbox CA's name constraints")
	}
}
