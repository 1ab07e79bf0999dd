package audit

import (
	"fmt"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/consent"
)

// OCSF constants for the User Access Management class
// (schema.ocsf.io/1.8.0/classes/user_access, class_uid 3005, category 3
// "Identity & Access Management"; events/iam/user_access.json of
// ocsf-schema 1.8.0). The schema's words: "User Access Management events
// report management updates to a user's privileges", activities 1
// "Assign Privileges" ("Assign privileges to a user.") and 2 "Revoke
// Privileges" ("Revoke privileges from a user."), the required
// privileges ("List of privileges assigned to a user.") and user ("User
// to which privileges were assigned."), the recommended resource
// ("Resource that the privileges give access to.").
//
// Every consent transition is one event of this class, as the design
// asks one class for all of them (docs/consent.md): a consent grant is a
// privilege (a folder, read-only or read-write; a host:port) assigned to
// a sandbox's workload while it runs and revoked again. A grant put in
// force (applied) is Assign Privileges with status Success, one that
// could not be put in force (apply_failed) Assign Privileges with status
// Failure, a revocation (by a person, a ttl's end, the requester's exit,
// the session's end) Revoke Privileges; the steps before an assignment
// (requested, prompted, approved, denied, expired, refused,
// rate_limited) are Other (99), "not mapped. See the activity_name
// attribute, which contains a data source specific value" (the base
// event's activity_id), activity_name naming the transition.
//
// The other candidates fit worse: Authorize Session (3003) reports
// "privileges or groups assigned to a new user session, usually at login
// time", not to a running workload; Entity Management (3004) is for
// managed objects, not privileges; Device Config State Change (5019,
// OpenShell's choice) reports "state changes that impact the security of
// the device", not an access given to someone. (Schema 1.9.0 deprecates
// 3005 for User Management; Corral writes 1.8.0, SchemaVersion.) What
// OCSF has no attribute for — the request's digest, the requester
// process (an IAM event has no process object besides the actor, which
// is the approver), the scope, the ceiling entry, the mount ids, the
// proxy's rule revision, the holders of a revoked folder — is under
// unmapped.consent.
const (
	ConsentClassUID        = 3005
	ConsentClassName       = "User Access Management"
	IAMCategory            = 3
	IAMCatName             = "Identity & Access Management"
	ActivityAssignPrivs    = 1
	ActivityRevokePrivs    = 2
	ActivityOther          = 99
	StatusOther            = 99
	consentUserTypeOther   = 99
	consentUserTypeCaption = "Sandbox workload"
)

// ConsentActivity is an OCSF User Access Management event (class
// 3005) for one consent transition.
type ConsentActivity struct {
	Classification
	StatusID     int    `json:"status_id"`
	Status       string `json:"status"`
	StatusDetail string `json:"status_detail,omitempty"`
	Message      string `json:"message"`

	Metadata Metadata `json:"metadata"`
	// Actor is the approver (a decision, a revocation), absent for the
	// workload's own steps.
	Actor *ConsentActor `json:"actor,omitempty"`
	// User is who the privileges are for: the sandbox's workload.
	User       ConsentUser       `json:"user"`
	Privileges []string          `json:"privileges"`
	Resources  []ConsentResource `json:"resources"` // one
	Device     Device            `json:"device"`
	Unmapped   ConsentUnmapped   `json:"unmapped"`
}

// OCSFClassUID implements Event.
func (ConsentActivity) OCSFClassUID() int { return ConsentClassUID }

// ConsentActor is the OCSF actor object with its user: the approver
// ("uid 1000", a token's subject, "tty", "standing grant (FILE)").
type ConsentActor struct {
	User ConsentUser `json:"user"`
}

// ConsentUser is the OCSF user object (name, type_id 99 Other with its
// caption, uid when known).
type ConsentUser struct {
	Name   string `json:"name"`
	UID    string `json:"uid,omitempty"`
	TypeID int    `json:"type_id,omitempty"`
	Type   string `json:"type,omitempty"`
}

// ConsentResource is the OCSF resource_details object: the folder or the
// host:port (name), its kind (type), the grant's id or, before one, the
// request's (uid).
type ConsentResource struct {
	Name string `json:"name"`
	Type string `json:"type"`
	UID  string `json:"uid,omitempty"`
}

// ConsentUnmapped is Corral's part of a consent event.
type ConsentUnmapped struct {
	SandboxID  string       `json:"sandbox_id,omitempty"`
	PolicyHash string       `json:"policy_hash,omitempty"`
	Provider   string       `json:"provider,omitempty"`
	Consent    ConsentExtra `json:"consent"`
}

// ConsentExtra is one transition's consent data.
type ConsentExtra struct {
	Transition string        `json:"transition"` // requested, prompted, approved, ...
	Request    string        `json:"request_id,omitempty"`
	Grant      string        `json:"grant_id,omitempty"`
	Kind       string        `json:"kind"`
	Target     string        `json:"target"`
	Access     string        `json:"access,omitempty"`
	Digest     string        `json:"digest,omitempty"`
	State      string        `json:"state,omitempty"`
	Scope      string        `json:"scope,omitempty"`
	Expires    int64         `json:"expires,omitempty"` // ms since the epoch: a ttl grant's end, a pending request's
	Ceiling    string        `json:"ceiling,omitempty"` // the policy entry that allowed or refused it
	Asked      int           `json:"asked,omitempty"`   // identical requests coalesced
	Reason     string        `json:"reason,omitempty"`  // the workload's, as shown to the approver
	Requester  *ConsentPeer  `json:"requester,omitempty"`
	Approver   string        `json:"approver,omitempty"`
	Effective  bool          `json:"effective"`
	Mode       string        `json:"mode,omitempty"`
	Path       string        `json:"path,omitempty"` // where a folder grant is inside
	MountIDs   []int         `json:"mount_ids,omitempty"`
	Locked     bool          `json:"locked,omitempty"`
	Revision   int           `json:"revision,omitempty"` // the proxy's rule revision (hosts)
	Holders    []ConsentHold `json:"holders,omitempty"`
	Detail     string        `json:"detail,omitempty"`
}

// ConsentPeer is the process that asked, as the kernel named it.
type ConsentPeer struct {
	PID int    `json:"pid,omitempty"`
	Exe string `json:"exe,omitempty"`
	Via string `json:"via,omitempty"`
}

// ConsentHold is one process still holding a revoked folder (fd -1: its
// cwd, -2: its root).
type ConsentHold struct {
	PID    int    `json:"pid"`
	FD     int    `json:"fd"`
	Path   string `json:"path,omitempty"`
	Exe    string `json:"exe,omitempty"`
	Killed bool   `json:"killed,omitempty"`
}

// consentOutcome is a transition's activity, status and severity.
func consentOutcome(transition string, holders int) (act int, actName string, status int, statusName string, sev int) {
	switch transition {
	case consent.ActApplied:
		return ActivityAssignPrivs, "Assign Privileges", StatusSuccess, "Success", SeverityInformational
	case consent.ActApplyFailed:
		return ActivityAssignPrivs, "Assign Privileges", StatusFailure, "Failure", SeverityMedium
	case consent.ActRevoked:
		if holders > 0 {
			return ActivityRevokePrivs, "Revoke Privileges", StatusSuccess, "Success", SeverityLow
		}
		return ActivityRevokePrivs, "Revoke Privileges", StatusSuccess, "Success", SeverityInformational
	case consent.ActApproved:
		return ActivityOther, transition, StatusSuccess, "Success", SeverityInformational
	case consent.ActRequested, consent.ActPrompted:
		return ActivityOther, transition, StatusOther, "Pending", SeverityInformational
	case consent.ActRefused, consent.ActRateLimited:
		return ActivityOther, transition, StatusFailure, "Failure", SeverityLow
	}
	return ActivityOther, transition, StatusFailure, "Failure", SeverityInformational // denied, expired
}

// Consent builds the event of one consent transition (consent.Event) of
// run's sandbox: class User Access Management (3005), type_uid
// 300500 + activity_id, the privilege as "folder:ro PATH", "folder:rw
// PATH" or "host HOST:PORT", the approver as actor.user, the rest under
// unmapped.consent.
func Consent(run RunInfo, e consent.Event) ConsentActivity {
	var x ConsentExtra
	x.Transition, x.Approver = e.Activity, e.By
	if q := e.Request; q != nil {
		x.Request, x.Grant, x.Kind, x.Target, x.Access = q.ID, q.Grant, string(q.Kind), q.Target, string(q.Access)
		x.Digest, x.State, x.Ceiling, x.Asked, x.Reason = q.Digest, string(q.State), q.Ceiling, q.Asked, q.Reason
		x.Effective, x.Path, x.Detail = q.Effective, q.Path, q.Detail
		if q.State == consent.StatePending && !q.Expires.IsZero() {
			x.Expires = q.Expires.UnixMilli()
		}
		if q.Requester != (consent.Requester{}) {
			x.Requester = &ConsentPeer{PID: q.Requester.PID, Exe: q.Requester.Exe, Via: q.Requester.Via}
		}
		if d := q.Decision; d != nil {
			x.Scope = string(d.Scope)
			if x.Approver == "" {
				x.Approver = d.By
			}
		}
	}
	if g := e.Grant; g != nil {
		x.Grant, x.Kind, x.Target, x.Access, x.Scope = g.ID, string(g.Kind), g.Target, string(g.Access), string(g.Scope)
		x.Effective, x.Mode, x.Path, x.Revision = g.Effective, string(g.Mode), g.Path, g.Revision
		if !g.Expires.IsZero() {
			x.Expires = g.Expires.UnixMilli()
		}
		if g.Detail != "" {
			x.Detail = g.Detail
		}
		if f := g.Folder; f != nil {
			x.MountIDs, x.Locked = f.MountIDs, f.Locked
			for _, h := range f.Holders {
				x.Holders = append(x.Holders, ConsentHold{PID: h.PID, FD: h.FD, Path: h.Path, Exe: h.Exe, Killed: h.Killed})
			}
		}
	}
	act, actName, status, statusName, sev := consentOutcome(e.Activity, len(x.Holders))
	t := e.Time
	if t.IsZero() {
		t = time.Now()
	}
	ev := ConsentActivity{
		Classification: classify(t, ConsentClassUID, ConsentClassName, IAMCategory, IAMCatName, act, actName),
		StatusID:       status, Status: statusName, StatusDetail: x.Detail,
		Metadata:   newMetadata(run, hostProfile...),
		User:       ConsentUser{Name: "sandbox " + run.SandboxID + " workload", TypeID: consentUserTypeOther, Type: consentUserTypeCaption},
		Privileges: []string{consentPrivilege(x)},
		Resources:  []ConsentResource{{Name: x.Target, Type: consentResourceType(x.Kind), UID: firstOf(x.Grant, x.Request)}},
		Device:     device(),
		Unmapped:   ConsentUnmapped{SandboxID: run.SandboxID, PolicyHash: run.PolicyHash, Provider: run.Provider, Consent: x},
	}
	ev.setSeverity(sev)
	if x.Approver != "" && e.Activity != consent.ActRequested && e.Activity != consent.ActPrompted {
		ev.Actor = &ConsentActor{User: ConsentUser{Name: x.Approver}}
	}
	ev.Message = consentMessage(x)
	return ev
}

// consentPrivilege names the privilege: "folder:ro PATH", "host H:P".
func consentPrivilege(x ConsentExtra) string {
	if x.Kind == string(consent.KindFolder) {
		return "folder:" + x.Access + " " + x.Target
	}
	return x.Kind + " " + x.Target
}

func consentResourceType(kind string) string {
	switch kind {
	case string(consent.KindFolder):
		return "Folder"
	case string(consent.KindHost):
		return "Host"
	}
	return "Other"
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// consentMessage is the one line a person reads: "consent applied:
// folder:ro /x (grant-…) by uid 1000 at /grants/ro/x-1".
func consentMessage(x ConsentExtra) string {
	var b strings.Builder
	fmt.Fprintf(&b, "consent %s: %s", x.Transition, consentPrivilege(x))
	if x.Requester != nil && x.Requester.PID > 0 && (x.Transition == consent.ActRequested || x.Transition == consent.ActPrompted) {
		fmt.Fprintf(&b, " for pid %d", x.Requester.PID)
		if x.Requester.Exe != "" {
			fmt.Fprintf(&b, " (%s)", x.Requester.Exe)
		}
	}
	if x.Approver != "" && x.Transition != consent.ActRequested && x.Transition != consent.ActPrompted {
		fmt.Fprintf(&b, " by %s", x.Approver)
	}
	if x.Scope != "" {
		fmt.Fprintf(&b, ", scope %s", x.Scope)
	}
	if x.Path != "" && x.Transition == consent.ActApplied {
		fmt.Fprintf(&b, ", at %s", x.Path)
	}
	if len(x.MountIDs) > 0 && x.Transition == consent.ActApplied {
		fmt.Fprintf(&b, ", mount %d", x.MountIDs[0])
	}
	if x.Revision > 0 {
		fmt.Fprintf(&b, ", rule revision %d", x.Revision)
	}
	if x.Detail != "" && x.Transition != consent.ActApplied {
		fmt.Fprintf(&b, ": %s", x.Detail)
	}
	return b.String()
}
