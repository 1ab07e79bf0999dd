package egress

import (
	"sync/atomic"
	"time"
)

// Credential is one secret the proxy holds for a sandbox that sees only
// Placeholder. The proxy substitutes the value for the placeholder only in
// a request it inspected and its rules admitted, and only in a place one
// of Bindings names for that request's host, port and path; anywhere else
// (another host, another header, the URL, a cookie, a body, encoded as
// base64, percent or JSON escapes) the placeholder is a mismatch: the
// request is refused (Deny) or forwarded with the placeholder as it is
// (a body is always forwarded: it is data), and Config.Finding hears of
// it. Responses from a bound host:port are scanned for the value (raw,
// base64, percent-encoded, JSON-escaped) and a hit is masked before it
// reaches the sandbox. The value can be changed (SetValue) or revoked
// while the proxy runs; a revoked or expired credential's placeholder is
// refused wherever it appears.
type Credential struct {
	Name        string
	Placeholder string
	Bindings    []Binding
	// Deny refuses requests with a mismatched placeholder outside a
	// body (on_mismatch: deny); false forwards them as they are.
	Deny bool

	state atomic.Pointer[secretState]
}

// Binding is one endpoint a credential's value may go to (policy
// CredentialEndpoint).
type Binding struct {
	Host  string // exact name or IP literal, as the allow rules write it
	Ports []int  // empty: 443
	Path  string // canonical path prefix ("" or "/": any; else ends in "/" or is matched whole)
	// Header and Template: the header named Header whose value is
	// Template with the placeholder for its one "{}" (literal text
	// compared without case).
	Header, Template string
	Basic            string // "user" or "password" of Authorization: Basic; "" none
	Query            string // a query parameter's name; "" none
	BodyMax          int64  // >0: substitute in bodies of at most this many bytes
}

// secretState is a credential's value and its validity, swapped whole.
type secretState struct {
	value    []byte
	expires  time.Time // zero: never
	revoked  bool
	reflects [][]byte // the forms of value the reflection guard looks for
}

// SetValue puts v in force from the next request on (a rotation: the
// placeholder stays); expires zero means it does not expire.
func (c *Credential) SetValue(v string, expires time.Time) {
	c.state.Store(&secretState{value: []byte(v), expires: expires, reflects: valueForms(v)})
}

// Revoke ends the credential: its placeholder is refused from now on.
func (c *Credential) Revoke() {
	c.state.Store(&secretState{revoked: true})
}

// CredentialFinding is what Config.Finding hears: a placeholder where it
// is not substituted, a revoked or expired credential used, or the value
// in a response. It never carries the value or the placeholder.
type CredentialFinding struct {
	Time       time.Time
	Kind       FindingKind
	Credential string // its Name
	Host       string
	Port       int
	Method     string
	Path       string // the request's escaped path, without the query
	// Where is the place: "header X-Api-Key", "header Authorization
	// (base64)", "query", "path", "body", "response header Location",
	// "response body (json-escaped)".
	Where string
	// Action: "denied", "forwarded" or "masked".
	Action string
}

// FindingKind names a CredentialFinding.
type FindingKind string

const (
	FindingMismatch   FindingKind = "credential_mismatch"   // placeholder outside its bound places
	FindingRevoked    FindingKind = "credential_revoked"    // revoked or expired
	FindingReflection FindingKind = "credential_reflection" // the value in a response
)

// valueForms are the byte strings the reflection guard masks for value v.
func valueForms(v string) [][]byte { return [][]byte{[]byte(v)} } // TODO(issue 16): base64, percent, JSON forms
