package provider

import (
	"slices"
	"strings"
	"testing"
)

// TestProxyEnv: the exact list, gRPC and gcloud included, each name once.
func TestProxyEnv(t *testing.T) {
	u := "http://127.0.0.1:3128"
	want := []string{
		"HTTP_PROXY=" + u, "http_proxy=" + u, "HTTPS_PROXY=" + u, "https_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u, "GRPC_PROXY=" + u, "grpc_proxy=" + u,
		"NO_PROXY=", "no_proxy=", "NODE_USE_ENV_PROXY=1", "npm_config_proxy=" + u, "npm_config_https_proxy=" + u,
		"CLOUDSDK_PROXY_TYPE=http", "CLOUDSDK_PROXY_ADDRESS=127.0.0.1", "CLOUDSDK_PROXY_PORT=3128",
	}
	if got := ProxyEnv(ProxyPort); !slices.Equal(got, want) {
		t.Errorf("ProxyEnv(%d):\n got %q\nwant %q", ProxyPort, got, want)
	}
	got := ProxyEnvAuth(49152, "corral", "0a1b")
	a := "http://corral:0a1b@127.0.0.1:49152"
	for _, kv := range []string{"HTTPS_PROXY=" + a, "grpc_proxy=" + a, "npm_config_https_proxy=" + a,
		"CLOUDSDK_PROXY_PORT=49152", "CLOUDSDK_PROXY_USERNAME=corral", "CLOUDSDK_PROXY_PASSWORD=0a1b"} {
		if !slices.Contains(got, kv) {
			t.Errorf("ProxyEnvAuth lacks %s: %q", kv, got)
		}
	}
	names := map[string]bool{}
	for _, kv := range got {
		k, _, _ := strings.Cut(kv, "=")
		if names[k] {
			t.Errorf("%s set twice", k)
		}
		names[k] = true
	}
}
