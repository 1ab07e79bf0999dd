//go:build linux

package e2e

import (
	"fmt"
	"testing"
)

// TestEgressProxyEnvAndWildcards: the workload's environment points gRPC
// and gcloud at the proxy too, and through the real proxy "**." allows a
// name two labels deep while "*." allows exactly one label.
func TestEgressProxyEnvAndWildcards(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		h := newUpstream(t, "127.0.0.2", 0, false)
		deep, one, two := h.hostPort("a.b.deep.allowed.test"), h.hostPort("a.one.allowed.test"), h.hostPort("a.b.one.allowed.test")
		n := egressNet{
			allow:   []ep{{"**.deep.allowed.test", []int{h.port}}, {"*.one.allowed.test", []int{h.port}}},
			private: []ep{{h.ip + "/32", []int{h.port}}},
			hosts:   map[string]string{"a.b.deep.allowed.test": h.ip, "a.one.allowed.test": h.ip, "a.b.one.allowed.test": h.ip},
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
