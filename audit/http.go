package audit

import (
	"net/url"
	"time"
)

// OCSF constants for the HTTP Activity class (schema.ocsf.io/1.3.0/classes/
// http_activity, class 4002, category 4 "Network Activity"). Each egress
// proxy decision is one event; action_id/disposition_id say allowed or
// denied.
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

// httpActivities maps methods to OCSF HTTP Activity activity_id values;
// anything else is 99 (Other).
var httpActivities = map[string]int{"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8}

// HTTPActivity is an OCSF 1.3.0 HTTP Activity event (class_uid 4002).
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
	Traffic     *Traffic   `json:"traffic,omitempty"`
	DstEndpoint Endpoint   `json:"dst_endpoint"`
	Device      Device     `json:"device"`
	Unmapped    EgressInfo `json:"unmapped"`
}

func (HTTPActivity) OCSFClassUID() int { return HTTPClassUID }

// HTTPRequest is the OCSF http_request object.
type HTTPRequest struct {
	Method  string `json:"http_method,omitempty"` // empty for a request too malformed to have one
	URL     URL    `json:"url"`
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
}

// EgressDecision is one decision of the egress proxy.
type EgressDecision struct {
	Time    time.Time
	Allowed bool
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
	act, ok := httpActivities[d.Method]
	name := d.Method
	if !ok {
		act, name = 99, "Other"
	}
	at := d.Time
	if at.IsZero() {
		at = time.Now()
	}
	e := HTTPActivity{
		Classification: classify(at, HTTPClassUID, HTTPClassName, NetworkCategory, NetworkCatName, act, name),
		Metadata:       newMetadata(run),
		HTTPRequest:    HTTPRequest{Method: d.Method, URL: redactURL(d.URL, d.Host, d.Port)},
		DstEndpoint:    Endpoint{Hostname: d.Host, IP: d.IP, Port: d.Port},
		Device:         device(),
		Unmapped:       EgressInfo{SandboxID: run.SandboxID, PolicyHash: run.PolicyHash, Rule: d.Rule, Reason: d.Reason, Hint: d.Hint, Inspected: d.Inspected, Credentials: d.Credentials},
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
		e.setSeverity(SeverityInformational)
	} else {
		e.ActionID, e.Action, e.DispositionID, e.Disposition = ActionDenied, "Denied", DispositionBlock, "Blocked"
		e.StatusID, e.Status, e.StatusDetail = StatusFailure, "Failure", d.Reason
		e.setSeverity(SeverityMedium)
	}
	return e
}

// redactURL keeps scheme, host, port and path; drops userinfo, query and
// fragment, which may carry credentials or data.
func redactURL(raw, host string, port int) URL {
	u := URL{Hostname: host, Port: port}
	if raw == "" {
		return u
	}
	p, err := url.Parse(raw)
	if err != nil {
		return u
	}
	u.Scheme, u.Path = p.Scheme, p.EscapedPath()
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	u.URLString = p.String()
	return u
}
