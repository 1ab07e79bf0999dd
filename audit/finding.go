package audit

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// OCSF constants for the Detection Finding class
// (schema.ocsf.io/1.8.0/classes/detection_finding, class 2004, category 2
// "Findings"). Corral reports each file a workload planted for later (a
// repository in a subdirectory, a shell rc file, an IDE task) as one
// finding with activity Create and status New.
const (
	FindingClassUID     = 2004
	FindingClassName    = "Detection Finding"
	FindingsCategory    = 2
	FindingsCatName     = "Findings"
	ActivityCreate      = 1
	FindingStatusNew    = 1
	SeverityHigh        = 4
	FindingTypePlanted  = "Planted for later"
	findingResourceType = "File"
)

// DetectionFinding is an OCSF Detection Finding event (class 2004).
type DetectionFinding struct {
	Classification
	StatusID    int             `json:"status_id"`
	Status      string          `json:"status"`
	Message     string          `json:"message"`
	Metadata    Metadata        `json:"metadata"`
	FindingInfo FindingInfo     `json:"finding_info"`
	Resources   []ResourceEntry `json:"resources"`
	Device      Device          `json:"device"`
	Unmapped    FindingExtra    `json:"unmapped"`
}

// OCSFClassUID implements Event.
func (DetectionFinding) OCSFClassUID() int { return FindingClassUID }

// FindingInfo is the OCSF finding_info object.
type FindingInfo struct {
	UID         string   `json:"uid"`
	Title       string   `json:"title"`
	Desc        string   `json:"desc,omitempty"`
	Types       []string `json:"types"`
	CreatedTime int64    `json:"created_time"` // ms since the Unix epoch
}

// ResourceEntry is the OCSF resource_details object: the planted path.
type ResourceEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// FindingExtra is Corral's part of a finding.
type FindingExtra struct {
	SandboxID  string   `json:"sandbox_id,omitempty"`
	PolicyHash string   `json:"policy_hash,omitempty"`
	Kind       string   `json:"kind"`           // planted.Kind*, or a credential finding's kind
	Keys       []string `json:"keys,omitempty"` // git configuration keys that run commands
	Strict     bool     `json:"strict,omitempty"`
	// A credential finding's: the credential's name (never its value or
	// placeholder), where in the request or response, and what the proxy
	// did ("denied", "forwarded", "masked").
	Credential string `json:"credential,omitempty"`
	Where      string `json:"where,omitempty"`
	Action     string `json:"action,omitempty"`
}

// Planted builds the finding for one planted path (kind and keys as
// internal/planted reports them; what is the one-line description). strict
// says the run failed because of it (--strict-tree).
func Planted(run RunInfo, path, kind, what string, keys []string, strict bool) DetectionFinding {
	now := time.Now()
	e := DetectionFinding{
		Classification: classify(now, FindingClassUID, FindingClassName, FindingsCategory, FindingsCatName, ActivityCreate, "Create"),
		StatusID:       FindingStatusNew,
		Status:         "New",
		Message:        path + ": " + what,
		Metadata:       newMetadata(run),
		FindingInfo: FindingInfo{UID: newUUID(), Title: "File planted for later in a read-write tree", Desc: what,
			Types: []string{FindingTypePlanted}, CreatedTime: now.UnixMilli()},
		Resources: []ResourceEntry{{Name: path, Type: findingResourceType}},
		Device:    device(),
		Unmapped:  FindingExtra{SandboxID: run.SandboxID, PolicyHash: run.PolicyHash, Kind: kind, Keys: keys, Strict: strict},
	}
	e.setSeverity(SeverityHigh)
	return e
}

// Finding types of credential findings (finding_info.types).
const (
	FindingTypeCredentialMismatch   = "Credential placeholder outside its binding"
	FindingTypeCredentialReflection = "Credential value in a response"
	FindingTypeCredentialRevoked    = "Revoked or expired credential used"
)

// CredentialUse is what a credential finding says (egress's
// CredentialFinding, without the egress import).
type CredentialUse struct {
	Time       time.Time
	Kind       string // credential_mismatch, credential_reflection, credential_revoked
	Credential string
	Host       string
	Port       int
	Method     string
	Path       string
	Where      string
	Action     string
}

// CredentialFinding builds the finding for one credential use the proxy
// refused, forwarded as it was or masked. The resource is the
// destination (host:port and path); nothing of the value or the
// placeholder is in it.
func CredentialFinding(run RunInfo, u CredentialUse) DetectionFinding {
	dest := net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
	title, typ, sev := "Credential placeholder outside its binding", FindingTypeCredentialMismatch, SeverityMedium
	switch u.Kind {
	case "credential_reflection":
		title, typ, sev = "Credential value in a response, masked", FindingTypeCredentialReflection, SeverityHigh
	case "credential_revoked":
		title, typ = "Revoked or expired credential used", FindingTypeCredentialRevoked
	}
	what := fmt.Sprintf("credential %s: %s of %s %s%s, %s", u.Credential, u.Where, u.Method, dest, u.Path, u.Action)
	e := DetectionFinding{
		Classification: classify(u.Time, FindingClassUID, FindingClassName, FindingsCategory, FindingsCatName, ActivityCreate, "Create"),
		StatusID:       FindingStatusNew,
		Status:         "New",
		Message:        what,
		Metadata:       newMetadata(run),
		FindingInfo: FindingInfo{UID: newUUID(), Title: title, Desc: what,
			Types: []string{typ}, CreatedTime: u.Time.UnixMilli()},
		Resources: []ResourceEntry{{Name: dest + u.Path, Type: "Network Endpoint"}},
		Device:    device(),
		Unmapped: FindingExtra{SandboxID: run.SandboxID, PolicyHash: run.PolicyHash, Kind: u.Kind,
			Credential: u.Credential, Where: u.Where, Action: u.Action},
	}
	e.setSeverity(sev)
	return e
}
