//go:build linux

package e2e

import (
	"fmt"
	"testing"

	"github.com/corral-sandbox/corral/qualify"
)

// TestEgressProxyEnvAndWildcards: the workload's environment points gRPC
// and gcloud at the proxy too, and through the real proxy "**." allows a
// name two labels deep while "*." allows exactly one label.
func TestEgressProxyEnvAndWildcards(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		deep, one, two := h.HostPort("a.b.deep.allowed.test"), h.HostPort("a.one.allowed.test"), h.HostPort("a.b.one.allowed.test")
		n := qualify.Egress{
			Allow:   []qualify.Endpoint{ep("**.deep.allowed.test", h.Port), ep("*.one.allowed.test", h.Port)},
			Private: []qualify.Endpoint{ep(h.IP+"/32", h.Port)},
			Hosts:   map[string]string{"a.b.deep.allowed.test": h.IP, "a.one.allowed.test": h.IP, "a.b.one.allowed.test": h.IP},
		}
		script := `echo "grpc: $GRPC_PROXY $grpc_proxy"
echo "gcloud: $CLOUDSDK_PROXY_TYPE $CLOUDSDK_PROXY_ADDRESS $CLOUDSDK_PROXY_PORT"
` + fmt.Sprintf(`echo "deep: $(curl -sS -m 5 http://%s/d)"
echo "one: $(curl -sS -m 5 http://%s/o)"
echo "two: $(curl -sS -m 5 -o /dev/null -w '%%{http_code}' http://%s/t)"
`, deep, one, two)
		res, _ := proxyRun(t, id, n, nil, nil, script)
		u := "http://127.0.0.1:3128"
		want(t, res, "grpc", u+" "+u, false)
		want(t, res, "gcloud", "http 127.0.0.1 3128", false)
		want(t, res, "deep", "upstream-ok "+deep+" /d", false)
		want(t, res, "one", "upstream-ok "+one+" /o", false)
		want(t, res, "two", "403", false)
	})
}
