//go:build linux

package qualify

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestSecretSpellings: the checks of P30 and P31 find a value however a
// client could read it back (the spellings the reflection guard must
// mask, and ones it may miss), and nothing in a masked or unrelated
// text; the in-sandbox client's templates spell a placeholder so.
func TestSecretSpellings(t *testing.T) {
	v := credSecret()
	var sec secrets
	sec.add("k", v)
	b64 := base64.StdEncoding.EncodeToString
	for name, s := range map[string]string{
		"raw":                    "key: " + v,
		"base64":                 "key=" + b64([]byte(v)),
		"base64 of git:VALUE":    "Basic " + b64([]byte("git:"+v)),
		"base64 behind a byte":   "x" + b64([]byte("\x00" + v))[4:],
		"base64url":              base64.RawURLEncoding.EncodeToString([]byte(v)),
		"query escape":           "?key=" + url.QueryEscape(v),
		"every byte, lower hex":  strings.ToLower(Expand("{{K.pct}}", map[string]string{"K": v})),
		`json \/`:                strings.ReplaceAll(v, "/", `\/`),
		`json \u002B (.NET)`:     strings.ReplaceAll(v, "+", `\u002B`),
		`json \u every char`:     Expand("{{K.json}}", map[string]string{"K": v}),
		"json in percent":        url.QueryEscape(strings.ReplaceAll(v, "/", `\/`)),
		"the client's JSON line": `{"body":"` + strings.ReplaceAll(v, "+", `\u002b`) + `"}`,
	} {
		if sec.find(s) == "" {
			t.Errorf("%s: %q: not found", name, s)
		}
		if r := sec.redact(s); strings.Contains(r, v) {
			t.Errorf("%s: redacted, still holds the value: %q", name, r)
		}
	}
	for _, s := range []string{strings.Repeat("*", len(v)), "key: " + v[:len(v)-1], credSecret(), b64([]byte(v[5:]))} {
		if w := sec.find(s); w != "" {
			t.Errorf("%q: found %s", s, w)
		}
	}
	vars := map[string]string{"P": "sk-abc"}
	for in, want := range map[string]string{
		"Bearer {{P}}":         "Bearer sk-abc",
		"{{P.b64}}":            b64([]byte("sk-abc")),
		"{{P.basic-pw}}":       b64([]byte("git:sk-abc")),
		"{{P.basic-user}}":     b64([]byte("sk-abc:x")),
		"{{P.pct}}":            "%73%6B%2D%61%62%63",
		"{{P.json}}":           `\u0073\u006b\u002d\u0061\u0062\u0063`,
		"{{Q}} {{P.unknown}}":  "{{Q}} {{P.unknown}}",
		`{"k":"{{P}}{{P}}"}`:   `{"k":"sk-abcsk-abc"}`,
		"no template at all {": "no template at all {",
	} {
		if got := Expand(in, vars); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCredentialCasesCatchTheHole: P30 with its credential bound to every
// host and place it is sent to (substitution unbound) and P31 with its
// echoes from a host no credential binds (no scan applies) fail, for the
// reasons the binding and the guard exist: the real value reached
// api.b.test and places of api.a.test the binding does not name, and the
// sandbox received the value back with no finding. On linux,
// linux-service, docker (when a daemon is there) and the gateway's
// linux sandboxes; unweakened they pass (e2e TestQualify, corral
// qualify).
func TestCredentialCasesCatchTheHole(t *testing.T) {
	needRootLinux(t)
	bin := buildCorral(t)
	provs := []string{"linux", LinuxService, "docker", LinuxGateway}
	for _, tc := range []struct {
		id   string
		hook *bool
		want []string
	}{
		{"P30", &credMisbound, []string{"api.b.test: Authorization: Bearer: status 200, want 403", "api.b.test: query ?key=: status 200, want 403",
			"a credential's real value reached the origin outside its bound place", "(header Authorization)", "(URL)", "(body)"}},
		{"P31", &reflectOff, []string{"body (h1): the sandbox received the value of p31", "chunks (h1): the sandbox received the value of p31",
			"b64 (h1): the sandbox received the value of p31, base64", "no Detection Finding naming the credential p31"}},
	} {
		t.Run(tc.id, func(t *testing.T) {
			*tc.hook = true
			defer func() { *tc.hook = false }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			rep, err := Qualify(ctx, Options{Bin: bin, Providers: provs, Cases: []string{tc.id}, PerfRuns: -1})
			if err != nil {
				t.Fatalf("Qualify: %v", err)
			}
			mustFailFor(t, rep, map[string][]string{tc.id: tc.want})
		})
	}
}
