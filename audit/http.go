package audit

import (
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// OCSF constants for the HTTP Activity class (schema.ocsf.io/1.8.0/classes/
// http_activity, class 4002, category 4 "Network Activity"). Each egress
// proxy decision is one event; action_id/disposition_id (the
// security_control profile) say allowed or denied.
const (
	HTTPClassUID     = 4002
	HTTPClassName    = "HTTP Activity"
	NetworkCategory  = 4
	NetworkCatName   = "Network Activity"
	ActionAllowed    = 1
	ActionDenied     = 2
	DispositionAllow = 1
	DispositionBlock = 2
)

// httpActivity is an HTTP Activity activity: its activity_id and caption
// (events/network/http_activity.json), which is also the caption of the
// method in http_request.http_method's enum.
type httpActivity struct {
	id      int
	caption string
}

// httpActivities maps the methods of http_request.http_method's enum to
// their activities. A request without a method is activity 0 (Unknown),
// one with another method 99 (Other), named after the method, which is
// then only in unmapped.http_method: http_method takes the enum's values
// alone.
var httpActivities = map[string]httpActivity{
	"CONNECT": {1, "Connect"}, "DELETE": {2, "Delete"}, "GET": {3, "Get"}, "HEAD": {4, "Head"},
	"OPTIONS": {5, "Options"}, "POST": {6, "Post"}, "PUT": {7, "Put"}, "TRACE": {8, "Trace"}, "PATCH": {9, "Patch"},
}

// httpProfiles are the profiles of HTTP Activity's device (host) and
// action and disposition (security_control): each attribute only a
// profile adds is valid only in an event that declares it.
var httpProfiles = []string{"host", "security_control"}

// HTTPActivity is an OCSF HTTP Activity event (class_uid 4002).
type HTTPActivity struct {
	Classification
	ActionID      int    `json:"action_id"`
	Action        string `json:"action"`
	DispositionID int    `json:"disposition_id"`
	Disposition   string `json:"disposition"`
	StatusID      int    `json:"status_id"`
	Status        string `json:"status"`
	StatusDetail  string `json:"status_detail,omitempty"`
	Message       string `json:"message,omitempty"`
	// Count, StartTime and EndTime (ms since the epoch) are set on an
	// aggregate of like decisions (OCSF base attributes count, start_time,
	// end_time: "the number of times that events in the same logical
	// group occurred" in that period).
	Count        int           `json:"count,omitempty"`
	StartTime    int64         `json:"start_time,omitempty"`
	EndTime      int64         `json:"end_time,omitempty"`
	Metadata     Metadata      `json:"metadata"`
	HTTPRequest  HTTPRequest   `json:"http_request"`
	HTTPResponse *HTTPResponse `json:"http_response,omitempty"`
	// Traffic counts an inspected request's body bytes: bytes_out from
	// the sandbox to the upstream, bytes_in back (OCSF network_traffic).
	Traffic *Traffic `json:"traffic,omitempty"`
	// DstEndpoint is the destination asked for; nil when the request
	// named none (too malformed to have one).
	DstEndpoint *Endpoint  `json:"dst_endpoint,omitempty"`
	Device      Device     `json:"device"`
	Unmapped    EgressInfo `json:"unmapped"`
}

func (HTTPActivity) OCSFClassUID() int { return HTTPClassUID }

// HTTPRequest is the OCSF http_request object.
type HTTPRequest struct {
	Method string `json:"http_method,omitempty"` // one of httpActivities' methods, else empty
	// URL is nil when there is neither a path nor a URL string (a
	// CONNECT's authority-form target: its host and port are
	// dst_endpoint's); OCSF's url wants at least one of them.
	URL     *URL   `json:"url,omitempty"`
	Version string `json:"version,omitempty"` // HTTP/1.1, HTTP/2.0 (inspected requests)
}

// Traffic is the OCSF network_traffic object.
type Traffic struct {
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
}

// URL is the OCSF url object; query strings and userinfo never appear.
type URL struct {
	Hostname  string `json:"hostname"`
	Port      int    `json:"port,omitempty"`
	Path      string `json:"path,omitempty"`
	Scheme    string `json:"scheme,omitempty"`
	URLString string `json:"url_string,omitempty"`
}

// HTTPResponse is the OCSF http_response object.
type HTTPResponse struct {
	Code int `json:"code"`
}

// Endpoint is the OCSF network endpoint object.
type Endpoint struct {
	Hostname string `json:"hostname,omitempty"`
	IP       string `json:"ip,omitempty"`
	Port     int    `json:"port,omitempty"`
}

// EgressInfo is Corral's data about the decision.
type EgressInfo struct {
	SandboxID  string `json:"sandbox_id,omitempty"`
	PolicyHash string `json:"policy_hash,omitempty"`
	Rule       string `json:"rule,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Hint       string `json:"hint,omitempty"`
	// Inspected: the request was read inside TLS the proxy terminated
	// (or is that terminated CONNECT).
	Inspected bool `json:"inspected,omitempty"`
	// Credentials names (comma-separated) the credentials whose values
	// the proxy put in the request.
	Credentials string `json:"credentials,omitempty"`
	// Method is a request's method outside http_method's enum.
	Method string `json:"http_method,omitempty"`
}

// EgressDecision is one decision of the egress proxy.
type EgressDecision struct {
	Time    time.Time
	Allowed bool
	Failed  bool // allowed, but the request or its tunnel failed (Reason says how)
	Method  string
	Host    string
	Port    int
	IP      string // the address dialed, "" when denied before resolving
	URL     string // as requested; redacted here
	Status  int    // HTTP status returned to the client; 0 when none
	Rule    string
	Reason  string
	Hint    string
	// Inspected, Proto, BytesOut and BytesIn are egress.Decision's.
	Inspected         bool
	Proto             string
	BytesOut, BytesIn int64
	Credentials       string
}

// Egress builds the HTTP Activity event for one proxy decision.
func Egress(run RunInfo, d EgressDecision) HTTPActivity {
	act, known := httpActivities[d.Method]
	method, other := d.Method, ""
	switch {
	case d.Method == "":
		act = httpActivity{0, "Unknown"}
	case !known:
		// The workload chose it: kept if a token of at most 32 bytes.
		method, other = "", clipToken(d.Method)
		act = httpActivity{ActivityOther, other} // OCSF: for 99, the source's own value
		if other == "" {
			act = httpActivity{0, "Unknown"}
		}
	}
	at := d.Time
	if at.IsZero() {
		at = time.Now()
	}
	e := HTTPActivity{
		Classification: classify(at, HTTPClassUID, HTTPClassName, NetworkCategory, NetworkCatName, act.id, act.caption),
		Metadata:       newMetadata(run, httpProfiles...),
		HTTPRequest:    HTTPRequest{Method: method, URL: redactURL(d.URL, d.Host, d.Port)},
		DstEndpoint:    dstEndpoint(d.Host, d.IP, d.Port),
		Device:         device(),
		Unmapped:       EgressInfo{SandboxID: run.SandboxID, PolicyHash: run.PolicyHash, Rule: d.Rule, Reason: d.Reason, Hint: d.Hint, Inspected: d.Inspected, Credentials: d.Credentials, Method: other},
	}
	if d.Inspected && d.Method != "CONNECT" { // a terminated CONNECT's Proto is its ALPN id, not a version
		e.HTTPRequest.Version = d.Proto
		e.Traffic = &Traffic{BytesIn: d.BytesIn, BytesOut: d.BytesOut}
	}
	if d.Status != 0 {
		e.HTTPResponse = &HTTPResponse{Code: d.Status}
	}
	if d.Allowed {
		e.ActionID, e.Action, e.DispositionID, e.Disposition = ActionAllowed, "Allowed", DispositionAllow, "Allowed"
		e.StatusID, e.Status = StatusSuccess, "Success"
		if d.Failed || d.Status >= 400 {
			e.StatusID, e.Status, e.StatusDetail = StatusFailure, "Failure", d.Reason
		}
		e.setSeverity(SeverityInformational)
	} else {
		e.ActionID, e.Action, e.DispositionID, e.Disposition = ActionDenied, "Denied", DispositionBlock, "Blocked"
		e.StatusID, e.Status, e.StatusDetail = StatusFailure, "Failure", d.Reason
		e.setSeverity(SeverityMedium)
	}
	return e
}

// dstEndpoint is the endpoint of a request for host (a name or an IP
// literal, which goes in ip) and port, dialed at ip ("" when not dialed);
// nil when the request named no host.
func dstEndpoint(host, ip string, port int) *Endpoint {
	if host == "" && ip == "" {
		return nil
	}
	e := &Endpoint{Hostname: host, IP: ip, Port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		e.Hostname, e.IP = "", a.String()
	}
	return e
}

// clipToken is s if it is an HTTP token (RFC 9110 section 5.6.2) of at
// most 32 bytes, else "".
func clipToken(s string) string {
	if len(s) > 32 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return ""
		}
	}
	return s
}

// redactURL keeps scheme, host, port and path; drops userinfo, query and
// fragment, which may carry credentials or data. It is nil when raw gives
// neither a path nor a URL string (a CONNECT's host:port).
func redactURL(raw, host string, port int) *URL {
	if raw == "" {
		return nil
	}
	p, err := url.Parse(raw)
	if err != nil || p.Scheme == "" && p.Path == "" {
		return nil
	}
	u := &URL{Hostname: host, Port: port, Scheme: p.Scheme, Path: p.EscapedPath()}
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	u.URLString = p.String()
	return u
}
