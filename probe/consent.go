package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// ConsentURLEnv is the variable naming the sandbox's consent API
// (provider.ConsentURLEnv; docs/consent.md): http://127.0.0.1:3129.
const ConsentURLEnv = "CORRAL_CONSENT_URL"

func init() { probes["consent"] = probeConsent }

// probeConsent asks the sandbox's consent API ($CORRAL_CONSENT_URL,
// docs/consent.md "The request channel") as a workload does, dialing it
// directly (never through HTTP_PROXY):
//
//	consent ask BODY             "consent ask": POST /v1/requests BODY
//	consent ask-wait BODY SECS   "consent ask", then "consent wait": GET the
//	                             answer's wait_url with timeout SECS (1-300)
//	consent get PATH             "consent GET PATH" (e.g. /v1/grants)
//
// Each Result is OK on a 2xx status; its Detail is "CODE BODY" (the
// answer's JSON, bounded by MaxDetail). A failed connection is a Result
// with OK false and the error as Detail.
func probeConsent(args []string) ([]Result, error) {
	if len(args) < 2 {
		return nil, usagef("usage: consent ask BODY | ask-wait BODY SECS | get PATH")
	}
	base := strings.TrimRight(os.Getenv(ConsentURLEnv), "/")
	if base == "" {
		return []Result{{What: "consent " + args[0], Detail: ConsentURLEnv + " is not set"}}, nil
	}
	cl := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 310 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(what, method, path, body string) (Result, []byte) {
		r := Result{What: what}
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			r.Detail = err.Error()
			return r, nil
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := cl.Do(req)
		if err != nil {
			r.Detail = err.Error()
			return r, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		r.OK = resp.StatusCode/100 == 2
		r.Detail = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return r, b
	}
	switch args[0] {
	case "ask":
		r, _ := do("consent ask", http.MethodPost, "/v1/requests", args[1])
		return []Result{r}, nil
	case "ask-wait":
		if len(args) != 3 {
			return nil, usagef("usage: consent ask-wait BODY SECS")
		}
		r, b := do("consent ask", http.MethodPost, "/v1/requests", args[1])
		var a struct {
			WaitURL string `json:"wait_url"`
		}
		if json.Unmarshal(b, &a) != nil || !strings.HasPrefix(a.WaitURL, "/") {
			return []Result{r, {What: "consent wait", Detail: "no wait_url in the answer"}}, nil
		}
		u := a.WaitURL
		if i := strings.Index(u, "?"); i >= 0 {
			u = u[:i]
		}
		w, _ := do("consent wait", http.MethodGet, u+"?timeout="+args[2], "")
		return []Result{r, w}, nil
	case "get":
		r, _ := do("consent GET "+args[1], http.MethodGet, args[1], "")
		return []Result{r}, nil
	}
	return nil, usagef("consent: unknown mode %q (ask, ask-wait, get)", args[0])
}
