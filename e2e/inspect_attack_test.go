//go:build linux

package e2e

// Inspected egress attacked from inside a real sandbox: the workload is
// curl (and the shell), the proxy is corral's, the origins are loopback
// HTTPS servers standing in for internet hosts that act as the
// frameworks behind real APIs do (a query parameter read by its first
// value, a method taken from X-HTTP-Method-Override). Cases marked "was
// a hole" failed until the proxy was fixed (887b518 and after); the rest
// were attacks already defeated. All are regression tests now.

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/pemcert"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/qualify"
)

// effects records what an origin did (not only what it was sent).
type effects struct {
	mu  sync.Mutex
	did []string
}

func (e *effects) add(s string) {
	e.mu.Lock()
	e.did = append(e.did, s)
	e.mu.Unlock()
}

func (e *effects) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.did...)
}

// TestInspectAttackCurl: curl in the sandbox against three inspected
// hosts.
//
// Was a hole (deny rule, repeated query parameter): api.allowed.test is
// access: full with deny_rules [{DELETE /repos/**, query force: true}];
// DELETE ?force=no&force=true (and ?Force=true) passes the proxy, and
// the origin, which reads the first value, deletes with force
// (egress/l7/l7.go compiled.match requires every value to match, as an
// allow rule must; a deny rule must match when any value does).
//
// Was a hole (method override): tls.allowed.test is access: read-write, which
// refuses DELETE; a POST with X-HTTP-Method-Override: DELETE (or
// X-HTTP-Method) passes the proxy, and the origin, as Google's APIs,
// Express's method-override and Symfony do, deletes
// (egress/inspect.go ServeHTTP decides r.Method alone).
//
// Was a hole (audit): a refused request's hint quotes its whole decoded path
// (l7.Decide "add {method, path} to rules"), unclipped by Proxy.log, so
// one request writes a multi-KiB record into the audit file.
//
// Defeated: path traversal and encodings, case games against the allow
// and deny rules, a lower-case method, Host and absolute-form request
// targets naming another host, over HTTP/1.1 and HTTP/2; no query value
// reaches the audit record.
func TestInspectAttackCurl(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		full := newOrigin(t, "api.allowed.test", "127.0.0.51", true)
		rw := newOrigin(t, "tls.allowed.test", "127.0.0.52", true)
		rules := newOrigin(t, "git.allowed.test", "127.0.0.53", true)
		var did effects
		full.mux.HandleFunc("/repos/", func(w http.ResponseWriter, r *http.Request) {
			if q := r.URL.Query(); r.Method == "DELETE" && (q.Get("force") == "true" || q.Get("Force") == "true") {
				did.add("forced delete " + r.URL.RequestURI())
			}
			fmt.Fprintf(w, "origin-ok %s %s\n", r.Method, r.URL.Path)
		})
		rw.mux.HandleFunc("/repos/", func(w http.ResponseWriter, r *http.Request) {
			m := r.Method
			for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
				if v := r.Header.Get(h); v != "" && r.Method == "POST" {
					m = strings.ToUpper(v)
				}
			}
			if m == "DELETE" {
				did.add("override delete " + r.URL.Path)
			}
			fmt.Fprintf(w, "origin-ok %s %s\n", m, r.URL.Path)
		})
		n := qualify.InspectNet(upstreamCAFile(t, id),
			full.inspected(`access: full, deny_rules: [{method: DELETE, path: "/repos/**", query: {force: "true"}}]`),
			rw.inspected(`access: read-write`),
			rules.inspected(`rules: [{method: GET, path: "/pub/**"}], deny_rules: [{path: "/pub/secret/**"}]`))
		const secret = "s3cr3tQUERYvalue"
		long := strings.Repeat("a", 6000)
		F, R, G := full.url(""), rw.url(""), rules.url("")
		script := curlReq + fmt.Sprintf(`req forced --http2 -X DELETE '%[1]s/repos/a?force=true'
req dupq --http2 -X DELETE '%[1]s/repos/a?force=no&force=true'
req dupq1 --http1.1 -X DELETE '%[1]s/repos/a?force=true&force=no'
req casek --http2 -X DELETE '%[1]s/repos/a?Force=true'
req override --http1.1 -X POST -H 'X-HTTP-Method-Override: DELETE' -d '' '%[2]s/repos/a'
req override2 --http2 -X POST -H 'X-HTTP-Method: DELETE' -d x '%[2]s/repos/b'
req plaindel --http2 -X DELETE '%[2]s/repos/c'
req ok --http2 '%[3]s/pub/x?token=%[4]s'
req dotdot --http1.1 --path-as-is '%[3]s/pub/../admin'
req dotdot2 --http2 --path-as-is '%[3]s/pub/%%2e%%2e/admin'
req encslash --http2 '%[3]s/pub%%2fx'
req semi --http1.1 --path-as-is '%[3]s/pub/x;/../../admin'
req upper --http2 '%[3]s/PUB/x'
req dsec --http2 '%[3]s/pub/SECRET/x'
req dsec2 --http1.1 '%[3]s/pub/secret/'
req dsec3 --http2 '%[3]s/pub/%%73ecret/x'
req lower --http1.1 -X get '%[3]s/pub/x'
req host1 --http1.1 -H 'Host: evil.test' '%[3]s/pub/x'
req host2 --http2 -H 'Host: evil.test' '%[3]s/pub/x'
req target --http1.1 --request-target 'https://evil.test/pub/x' '%[3]s/pub/x'
echo "long: $(curl -s -m 20 -o /dev/null -w '%%{http_code} %%{http_version}' --http2 '%[3]s/%[5]s?token=%[4]s')"
`, F, R, G, secret, long)
		logf := filepath.Join(mkdir(t, id, "attack-audit"), "audit.jsonl")
		pol := writePolicy(t, id, policy{Network: "proxy", NetRules: n})
		res := corral(t, run{id: id, policy: pol, workdir: mkdir(t, id, "attack"), flags: []string{"--audit", logf}, args: sh(script), timeout: 120 * time.Second})
		expectLines(t, res,
			"forced: 403 2 {*",
			"dupq: 403 2 {*",       // was 200
			"dupq1: 403 1.1 {*",    // was 200
			"casek: 403 2 {*",      // was 200
			"override: 403 1.1 {*", // was 200
			"override2: 403 2 {*",  // was 200
			"plaindel: 403 2 {*",
			"ok: 200 2 origin-ok GET /pub/x HTTP/2.0",
			"dotdot: 400 1.1 {*", "dotdot2: 400 2 {*", "encslash: 400 2 {*", "semi: 400 1.1 {*",
			"upper: 403 2 {*", "dsec: 403 2 {*", "dsec2: 403 1.1 {*", "dsec3: 403 2 {*", "lower: 403 1.1 {*",
			"host1: 421 1.1 {*", "host2: 421 2 {*", "target: 421 1.1 {*",
			"long: 403 2")
		if d := did.list(); len(d) > 0 {
			t.Errorf("the origins acted on requests the rules refuse: %q", d)
		}
		for _, o := range []*origin{full, rw, rules} {
			for _, r := range o.requests() {
				if strings.Contains(strings.ToLower(r), "admin") || strings.Contains(strings.ToLower(r), "secret") || strings.Contains(r, "evil") {
					t.Errorf("%s received %q", o.name, r)
				}
			}
		}
		// (The launch record holds the script, secret and all: that is
		// the command line, recorded as given.)
		for _, e := range egressEvents(t, logf) {
			if strings.Contains(e.raw, secret) {
				t.Errorf("an egress record holds a query value: %.300s", e.raw)
			}
			if len(e.Unmapped.Hint) > 300 || len(e.Unmapped.Reason) > 300 {
				t.Errorf("an egress record quotes %d bytes of the client in its hint and %d in its reason (the proxy clips what it quotes to 256): %.120s...", len(e.Unmapped.Hint), len(e.Unmapped.Reason), e.Unmapped.Hint)
			}
		}
	})
}

// lastCert is the last certificate of a PEM bundle (where the session
// puts the sandbox's CA) and how many certificates the bundle holds.
func lastCert(t *testing.T, bundle []byte) (*x509.Certificate, int) {
	t.Helper()
	certs, err := pemcert.Parse(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) == 0 {
		t.Fatal("the bundle holds no certificate")
	}
	return certs[len(certs)-1], len(certs)
}

// TestInspectAttackTrustBundle: a workload that tries to change the
// trust bundle it was given (write, append, replace, remove, relink,
// chmod the bundle at /run/corral/ca-bundle.pem and the distro path;
// plant a file beside it) changes nothing, and leaves nothing for the
// next run: a later sandbox of the same policy trusts a CA of its own
// (a key that leaked from the first run vouches for nothing in the
// second), constrained to the inspected host, in a bundle of the host's
// roots and that CA alone.
func TestInspectAttackTrustBundle(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.54", true)
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: read-only"))
		pol := writePolicy(t, id, policy{Network: "proxy", NetRules: n})
		const attack = `try() { l=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$l: changed"; else echo "$l: refused"; fi; }
printf '%s\n' '-----BEGIN CERTIFICATE-----' 'MIIBplanted' '-----END CERTIFICATE-----' > mine.pem
for f in /run/corral/ca-bundle.pem /etc/ssl/certs/ca-certificates.crt; do
  try "append $f" sh -c "cat mine.pem >> $f"
  try "write $f" sh -c "cat mine.pem > $f"
  try "cp $f" cp mine.pem $f
  try "mv $f" mv $f $f.gone
  try "rm $f" rm -f $f
  try "ln $f" ln -sf $PWD/mine.pem $f
  try "chmod $f" chmod 666 $f
  try "truncate $f" truncate -s 0 $f
done
try "plant /run/corral" cp mine.pem /run/corral/planted.pem
try "plant /etc/ssl/certs" cp mine.pem /etc/ssl/certs/planted.pem
cp /run/corral/ca-bundle.pem bundle.pem; echo "copied: $?"
echo "env: $SSL_CERT_FILE"
`
		var cas []*x509.Certificate
		for i := 1; i <= 2; i++ {
			wd := mkdir(t, id, fmt.Sprintf("bundle%d", i))
			res := corral(t, run{id: id, policy: pol, workdir: wd, args: sh(attack)})
			for _, l := range strings.Split(res.stdout, "\n") {
				if strings.HasSuffix(l, ": changed") {
					t.Errorf("run %d: %s", i, l)
				}
			}
			expectLines(t, res, "copied: 0", "env: /run/corral/ca-bundle.pem")
			b := []byte(readFile(t, filepath.Join(wd, "bundle.pem")))
			if bytes.Contains(b, []byte("MIIBplanted")) {
				t.Errorf("run %d: the bundle holds the workload's certificate", i)
			}
			if bytes.Contains(b, []byte("PRIVATE KEY")) {
				t.Errorf("run %d: the bundle holds a private key", i)
			}
			ca, count := lastCert(t, b)
			host, _ := hostRootsCount(t)
			if count != host+1 {
				t.Errorf("run %d: the bundle holds %d certificates, want the host's %d and the sandbox's CA", i, count, host)
			}
			if !ca.IsCA || !ca.PermittedDNSDomainsCritical || strings.Join(ca.PermittedDNSDomains, ",") != "api.allowed.test" {
				t.Errorf("run %d: the bundle's last certificate is not the sandbox's CA constrained to api.allowed.test: %s %v", i, ca.Subject, ca.PermittedDNSDomains)
			}
			cas = append(cas, ca)
		}
		if len(cas) == 2 && bytes.Equal(cas[0].RawSubjectPublicKeyInfo, cas[1].RawSubjectPublicKeyInfo) {
			t.Error("two runs of the same policy trusted the same CA key: a key that leaked from one would serve the next")
		}
	})
}

// hostRootsCount is how many certificates the host's system bundle (the
// one the session copies) holds.
func hostRootsCount(t *testing.T) (int, string) {
	t.Helper()
	for _, p := range provider.TrustBundlePaths {
		if b, err := os.ReadFile(p); err == nil {
			ders, _ := pemcert.Split(b)
			return len(ders), p
		}
	}
	t.Fatal("no host CA bundle")
	return 0, ""
}
