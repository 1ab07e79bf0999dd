//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/qualify"
)

// Per-request decisions on a kept-alive client connection: a pipelined
// request to a denied host after an allowed one is refused (and reaches
// nothing); a request to a second allowed host is sent to that host, not
// down the first host's reused upstream connection. Hop-by-hop and proxy
// credentials are not forwarded; a port outside the rule is refused; large
// and chunked bodies pass intact.
func TestEgressPerRequest(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		a := newUpstream(t, "127.0.0.2", 0, false)
		b := newUpstream(t, "127.0.0.3", 0, false)
		evil := newUpstream(t, "127.0.0.4", 0, false)
		n := qualify.Egress{
			Allow:   []qualify.Endpoint{ep("a.allowed.test", a.Port), ep("b.allowed.test", b.Port)},
			Private: []qualify.Endpoint{ep(a.IP+"/32", a.Port), ep(b.IP+"/32", b.Port), ep(evil.IP+"/32", evil.Port)},
			Hosts:   map[string]string{"a.allowed.test": a.IP, "b.allowed.test": b.IP, "evil.test": evil.IP},
		}
		A, B, E := a.HostPort("a.allowed.test"), b.HostPort("b.allowed.test"), evil.HostPort("evil.test")
		get := func(hp, path, extra string) string {
			return "GET http://" + hp + path + " HTTP/1.1\\r\\nHost: " + hp + "\\r\\n" + extra + "\\r\\n"
		}
		pA, hopTok := token(), token()
		var script strings.Builder
		all := func(name, req string) {
			fmt.Fprintf(&script, "%s rawhttp-all %s '%s' | sed 's/^rawhttp-all/%s/'\n", probeBin, proxyAddr, req, name)
		}
		all("deny-after-allow", get(A, "/1", "")+get(E, "/", "")+get(B, "/3", "Connection: close\\r\\n"))
		all("switch-host", get(A, "/4", "")+get(B, "/5", "Connection: close\\r\\n"))
		all("hop", get(A, "/hdrs", "Proxy-Authorization: Basic "+pA+"\\r\\nProxy-Connection: keep-alive\\r\\nConnection: close, X-Hop\\r\\nX-Hop: "+hopTok+"\\r\\nX-Normal: kept\\r\\n"))
		fmt.Fprintf(&script, "%s rawhttp %s 'CONNECT a.allowed.test:1 HTTP/1.1\\r\\nHost: a.allowed.test:1\\r\\n\\r\\n' | sed 's/^rawhttp/wrong-port-connect/'\n", probeBin, proxyAddr)
		fmt.Fprintf(&script, "%s rawhttp %s '%s' | sed 's/^rawhttp/wrong-port-get/'\n", probeBin, proxyAddr, get("a.allowed.test:1", "/", ""))
		fmt.Fprintf(&script, "echo \"post: $(head -c 1048576 /dev/zero | curl -sS -m 20 --data-binary @- http://%s/len)\"\n", A)
		fmt.Fprintf(&script, "echo \"post-chunked: $(head -c 1048576 /dev/zero | curl -sS -m 20 -H 'Transfer-Encoding: chunked' --data-binary @- http://%s/len)\"\n", A)
		res, _ := proxyRun(t, id, n, nil, nil, script.String())

		want(t, res, "deny-after-allow[0]", "HTTP/1.1 200 OK", false)
		want(t, res, "deny-after-allow[1]", "HTTP/1.1 403 Forbidden", false)
		if v, ok := lineValue(res.stdout, "deny-after-allow[2]"); ok {
			want(t, res, "deny-after-allow-body[2]", fmt.Sprintf("%q", "upstream-ok "+B+" /3\n"), false)
			_ = v
		}
		want(t, res, "switch-host[0]", "HTTP/1.1 200 OK", false)
		want(t, res, "switch-host-body[0]", fmt.Sprintf("%q", "upstream-ok "+A+" /4\n"), false)
		want(t, res, "switch-host[1]", "HTTP/1.1 200 OK", false)
		want(t, res, "switch-host-body[1]", fmt.Sprintf("%q", "upstream-ok "+B+" /5\n"), false)
		for _, r := range a.Requests() {
			if strings.Contains(r, "b.allowed.test") || strings.Contains(r, "evil") {
				t.Errorf("upstream a served a request meant for another host: %q", r)
			}
		}
		hop, _ := lineValue(res.stdout, "hop-body[0]")
		if !strings.Contains(hop, "X-Normal: kept") {
			t.Errorf("hop: the upstream did not get the end-to-end header X-Normal\n%s", res)
		}
		for _, tok := range []string{pA, hopTok, "Proxy-Connection"} {
			if strings.Contains(hop, tok) {
				t.Errorf("hop: the upstream received %q (proxy credentials / hop-by-hop headers must not be forwarded): %s", tok, hop)
			}
		}
		want(t, res, "wrong-port-connect", "HTTP/1.1 403", true)
		want(t, res, "wrong-port-get", "HTTP/1.1 403", true)
		want(t, res, "post", "len 1048576 <nil>", false)
		want(t, res, "post-chunked", "len 1048576 <nil>", false)
		assertUntouched(t, evil, "the evil upstream")
	})
}
