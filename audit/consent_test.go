package audit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/consent"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// consentJSON is c's event of testRun as it is written (JSON).
func consentJSON(t *testing.T, c consent.Event) map[string]any {
	t.Helper()
	b, err := json.Marshal(Consent(testRun(), c))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	validOCSF(t, c.Activity, Consent(testRun(), c))
	return m
}

func TestConsentActivities(t *testing.T) {
	for _, c := range []struct {
		activity string
		act      int
		actName  string
		status   int
		statName string
		sev      int
		sevName  string
	}{
		{consent.ActRequested, 99, "requested", 99, "Pending", 1, "Informational"},
		{consent.ActPrompted, 99, "prompted", 99, "Pending", 1, "Informational"},
		{consent.ActApproved, 99, "approved", 1, "Success", 1, "Informational"},
		{consent.ActDenied, 99, "denied", 2, "Failure", 1, "Informational"},
		{consent.ActExpired, 99, "expired", 2, "Failure", 1, "Informational"},
		{consent.ActApplied, 1, "Assign Privileges", 1, "Success", 1, "Informational"},
		{consent.ActApplyFailed, 1, "Assign Privileges", 2, "Failure", 3, "Medium"},
		{consent.ActRevoked, 2, "Revoke Privileges", 1, "Success", 1, "Informational"},
		{consent.ActRateLimited, 99, "rate_limited", 2, "Failure", 2, "Low"},
		{consent.ActRefused, 99, "refused", 2, "Failure", 2, "Low"},
	} {
		t.Run(c.activity, func(t *testing.T) {
			m := consentJSON(t, consent.Event{Activity: c.activity, By: "uid 1000",
				Request: &consent.Request{ID: "req-1", Kind: consent.KindHost, Target: "api.example.com:443"}})
			wantField(t, m, "class_uid", 3005)
			wantField(t, m, "class_name", "User Access Management")
			wantField(t, m, "category_uid", 3)
			wantField(t, m, "category_name", "Identity & Access Management")
			wantField(t, m, "activity_id", c.act)
			wantField(t, m, "activity_name", c.actName)
			wantField(t, m, "type_uid", 300500+c.act)
			typeName := "User Access Management: " + c.actName
			if c.act == 99 {
				typeName = "User Access Management: Other" // the type's caption; activity_name has the transition
			}
			wantField(t, m, "type_name", typeName)
			wantField(t, m, "status_id", c.status)
			wantField(t, m, "status", c.statName)
			wantField(t, m, "severity_id", c.sev)
			wantField(t, m, "severity", c.sevName)
			wantField(t, m, "unmapped.consent.transition", c.activity)
			wantField(t, m, "privileges", []any{"host api.example.com:443"})
			_, hasActor := m["actor"]
			if want := c.activity != consent.ActRequested && c.activity != consent.ActPrompted; hasActor != want {
				t.Errorf("actor present %v, want %v (the approver, once someone decided)", hasActor, want)
			}
		})
	}
}

func TestConsentRevokedHolders(t *testing.T) {
	m := consentJSON(t, consent.Event{Activity: consent.ActRevoked, By: "uid 1000", Grant: &consent.Grant{ID: "grant-7", Request: "req-7",
		Kind: consent.KindFolder, Target: "/home/me/src/a", Access: policy.AccessReadWrite, Scope: consent.ScopeSession, Path: "/grants/rw/a-1",
		Folder: &provider.GrantStatus{MountIDs: []int{412}, Holders: []provider.Holder{
			{PID: 812, FD: 3, Path: "/grants/rw/a-1/held.txt"}, {PID: 813, FD: -1, Path: "/grants/rw/a-1", Killed: true}}}}})
	wantField(t, m, "activity_id", 2)
	wantField(t, m, "type_uid", 300502)
	wantField(t, m, "severity_id", 2) // held: someone may need to act
	wantField(t, m, "severity", "Low")
	wantField(t, m, "actor.user.name", "uid 1000")
	wantField(t, m, "privileges", []any{"folder:rw /home/me/src/a"})
	wantField(t, m, "resources.0.uid", "grant-7")
	wantField(t, m, "unmapped.consent.holders", []any{
		map[string]any{"pid": 812.0, "fd": 3.0, "path": "/grants/rw/a-1/held.txt"},
		map[string]any{"pid": 813.0, "fd": -1.0, "path": "/grants/rw/a-1", "killed": true},
	})
	if got := get(t, m, "message").(string); got != "consent revoked: folder:rw /home/me/src/a by uid 1000, scope session" {
		t.Errorf("message = %q", got)
	}
}

func TestConsentJSONShape(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	q := &consent.Request{ID: "req-1", Grant: "grant-1", Kind: consent.KindFolder, Target: "/home/me/src/docs", Access: policy.AccessReadOnly,
		Digest: "sha256:00ff", State: consent.StateApproved, Ceiling: "consent.folders.ask[0]", Asked: 2, Reason: "read the docs",
		Requester: consent.Requester{PID: 4242, Exe: "/usr/bin/python3", Via: "tcp"}, Effective: true, Path: "/grants/ro/docs-1",
		Decision: &consent.Decision{Approve: true, Scope: consent.ScopeTTL, By: "uid 1000"}}
	g := &consent.Grant{ID: "grant-1", Request: "req-1", Kind: consent.KindFolder, Target: "/home/me/src/docs", Access: policy.AccessReadOnly,
		Scope: consent.ScopeTTL, Expires: at.Add(time.Hour), Desired: true, Effective: true, Mode: provider.ConsentLive, Path: "/grants/ro/docs-1",
		Folder: &provider.GrantStatus{MountIDs: []int{61, 62}, Locked: true}}
	m := consentJSON(t, consent.Event{Activity: consent.ActApplied, Time: at, Request: q, Grant: g})
	for _, f := range []struct {
		path string
		want any
	}{
		{"time", at.UnixMilli()},
		{"class_uid", 3005},
		{"activity_id", 1},
		{"activity_name", "Assign Privileges"},
		{"type_uid", 300501},
		{"status_id", 1},
		{"status", "Success"},
		{"severity_id", 1},
		{"message", "consent applied: folder:ro /home/me/src/docs by uid 1000, scope ttl, at /grants/ro/docs-1, mount 61"},
		{"metadata.version", SchemaVersion},
		{"metadata.product.name", "Corral"},
		{"metadata.product.vendor_name", "Corral"},
		{"metadata.product.version", "0.1.0"},
		{"metadata.correlation_uid", "sbx-1234"},
		{"actor.user.name", "uid 1000"},
		{"user.name", "sandbox sbx-1234 workload"},
		{"user.type_id", 99},
		{"user.type", "Sandbox workload"},
		{"privileges", []any{"folder:ro /home/me/src/docs"}},
		{"resources.0.name", "/home/me/src/docs"},
		{"resources.0.type", "Folder"},
		{"resources.0.uid", "grant-1"},
		{"unmapped.sandbox_id", "sbx-1234"},
		{"unmapped.policy_hash", "sha256:abcd"},
		{"unmapped.provider", "linux"},
		{"unmapped.consent.transition", "applied"},
		{"unmapped.consent.request_id", "req-1"},
		{"unmapped.consent.grant_id", "grant-1"},
		{"unmapped.consent.kind", "folder"},
		{"unmapped.consent.target", "/home/me/src/docs"},
		{"unmapped.consent.access", "ro"},
		{"unmapped.consent.digest", "sha256:00ff"},
		{"unmapped.consent.state", "approved"},
		{"unmapped.consent.scope", "ttl"},
		{"unmapped.consent.expires", at.Add(time.Hour).UnixMilli()},
		{"unmapped.consent.ceiling", "consent.folders.ask[0]"},
		{"unmapped.consent.asked", 2},
		{"unmapped.consent.reason", "read the docs"},
		{"unmapped.consent.requester", map[string]any{"pid": 4242.0, "exe": "/usr/bin/python3", "via": "tcp"}},
		{"unmapped.consent.approver", "uid 1000"},
		{"unmapped.consent.effective", true},
		{"unmapped.consent.mode", "live"},
		{"unmapped.consent.path", "/grants/ro/docs-1"},
		{"unmapped.consent.mount_ids", []any{61.0, 62.0}},
		{"unmapped.consent.locked", true},
	} {
		want := f.want
		if n, ok := want.(int64); ok {
			want = float64(n)
		}
		wantField(t, m, f.path, want)
	}
	if !uuidRE.MatchString(get(t, m, "metadata.uid").(string)) {
		t.Errorf("metadata.uid = %v, want a UUID v4", m["metadata"])
	}
	if _, ok := get(t, m, "device").(map[string]any)["os"]; !ok {
		t.Errorf("device has no os: %v", m["device"])
	}
	// Nothing of the requester outside unmapped: the actor is the approver.
	if a := get(t, m, "actor").(map[string]any); len(a) != 1 {
		t.Errorf("actor = %v, want only the approver's user", a)
	}
}

func TestConsentHostRequested(t *testing.T) {
	m := consentJSON(t, consent.Event{Activity: consent.ActRequested, Request: &consent.Request{ID: "req-2", Kind: consent.KindHost,
		Target: "api.example.com:443", State: consent.StatePending, Requester: consent.Requester{PID: 99, Exe: "/usr/bin/curl"},
		Reason: "fetch", Expires: time.UnixMilli(5000)}})
	wantField(t, m, "resources.0.type", "Host")
	wantField(t, m, "resources.0.uid", "req-2")
	wantField(t, m, "unmapped.consent.expires", 5000)
	wantField(t, m, "message", "consent requested: host api.example.com:443 for pid 99 (/usr/bin/curl)")
	c := get(t, m, "unmapped.consent").(map[string]any)
	for _, k := range []string{"access", "grant_id", "mount_ids", "holders", "revision", "approver"} {
		if _, ok := c[k]; ok {
			t.Errorf("unmapped.consent.%s present in a host request: %v", k, c)
		}
	}
	h := consentJSON(t, consent.Event{Activity: consent.ActApplied,
		Grant: &consent.Grant{ID: "grant-3", Kind: consent.KindHost, Target: "a.example.com:443", Scope: consent.ScopeOnce, Revision: 4}})
	wantField(t, h, "unmapped.consent.revision", 4)
	wantField(t, h, "message", "consent applied: host a.example.com:443, scope once, rule revision 4")
}
