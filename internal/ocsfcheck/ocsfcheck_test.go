package ocsfcheck

import (
	"encoding/json"
	"strings"
	"testing"
)

// valid is an HTTP Activity event valid for 1.8.0, with the profiles of
// its device and action.
const valid = `{"time":1700000000000,"class_uid":4002,"class_name":"HTTP Activity","category_uid":4,"category_name":"Network Activity",
"activity_id":3,"activity_name":"Get","type_uid":400203,"type_name":"HTTP Activity: Get","severity_id":1,"severity":"Informational",
"action_id":1,"action":"Allowed","status_id":1,"status":"Success",
"metadata":{"version":"1.8.0","profiles":["host","security_control"],"product":{"name":"Corral","vendor_name":"Corral"}},
"http_request":{"http_method":"GET","url":{"hostname":"a.test","port":80,"path":"/","url_string":"http://a.test/"}},
"http_response":{"code":200},"dst_endpoint":{"hostname":"a.test","ip":"127.0.0.2","port":80},
"device":{"hostname":"vm","type_id":0,"type":"Unknown","os":{"name":"Linux","type_id":200}},"unmapped":{"anything":{"goes":[1,2]}}}`

// mutate is valid with f applied to its decoded form.
func mutate(t *testing.T, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(valid), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func obj(m map[string]any, k string) map[string]any { return m[k].(map[string]any) }

func TestValid(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != Version {
		t.Fatalf("embedded schema is %s, want %s", s.Version, Version)
	}
	r := s.Validate([]byte(valid))
	if len(r.Errors)+len(r.Warnings) > 0 {
		t.Fatalf("a valid event: %v %v", r.Errors, r.Warnings)
	}
}

// TestFinds: each rule of the OCSF Server's validator is found, by kind
// and path, in an event broken in that one way.
func TestFinds(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind, path string
		warning    bool
		f          func(m map[string]any)
	}{
		{"attribute_unknown", "nonsense", false, func(m map[string]any) { m["nonsense"] = 1 }},
		{"attribute_unknown", "http_request.url.query", false, func(m map[string]any) { obj(obj(m, "http_request"), "url")["query"] = "x" }},
		{"attribute_unknown", "disposition", false, func(m map[string]any) { // a profile's, undeclared
			obj(m, "metadata")["profiles"] = []any{"host"}
			delete(m, "action")
			delete(m, "action_id")
			m["disposition"] = "Allowed"
		}},
		{"attribute_unknown", "device", false, func(m map[string]any) { obj(m, "metadata")["profiles"] = []any{"security_control"} }},
		{"profile_unknown", "metadata.profiles[2]", false, func(m map[string]any) {
			obj(m, "metadata")["profiles"] = []any{"host", "security_control", "nosuch"}
		}},
		{"attribute_required_missing", "severity_id", false, func(m map[string]any) { delete(m, "severity_id") }},
		{"attribute_required_missing", "http_response.code", false, func(m map[string]any) { delete(obj(m, "http_response"), "code") }},
		{"attribute_wrong_type", "time", false, func(m map[string]any) { m["time"] = "yesterday" }},
		{"attribute_wrong_type", "severity_id", false, func(m map[string]any) { m["severity_id"] = 1.5 }},
		{"attribute_wrong_type", "http_response.code", false, func(m map[string]any) { obj(m, "http_response")["code"] = 1 << 40 }}, // integer_t is 32-bit
		{"attribute_value_exceeds_range", "dst_endpoint.port", false, func(m map[string]any) { obj(m, "dst_endpoint")["port"] = 70000 }},
		{"attribute_value_exceeds_max_len", "dst_endpoint.ip", false, func(m map[string]any) { obj(m, "dst_endpoint")["ip"] = strings.Repeat("1", 41) }},
		{"attribute_value_regex_not_matched", "dst_endpoint.ip", true, func(m map[string]any) { obj(m, "dst_endpoint")["ip"] = "not-an-ip" }},
		{"attribute_enum_value_unknown", "http_request.http_method", false, func(m map[string]any) { obj(m, "http_request")["http_method"] = "PROPFIND" }},
		{"attribute_enum_value_unknown", "activity_id", false, func(m map[string]any) { m["activity_id"], m["type_uid"] = 42, 400242 }},
		{"attribute_enum_sibling_incorrect", "activity_name", true, func(m map[string]any) { m["activity_name"] = "GET" }},
		{"attribute_enum_sibling_suspicious_other", "activity_name", true, func(m map[string]any) {
			m["activity_id"], m["activity_name"], m["type_uid"], m["type_name"] = 99, "Other", 400299, "HTTP Activity: Other"
		}},
		{"attribute_deprecated", "http_status", true, func(m map[string]any) { m["http_status"] = 200 }},
		{"type_uid_incorrect", "type_uid", false, func(m map[string]any) { m["type_uid"] = 400204 }},
		{"constraint_failed", "http_request.url", false, func(m map[string]any) {
			u := obj(obj(m, "http_request"), "url")
			delete(u, "path")
			delete(u, "url_string")
		}},
		{"constraint_failed", "", false, func(m map[string]any) { delete(m, "http_request"); delete(m, "http_response") }},
		{"constraint_failed", "dst_endpoint", false, func(m map[string]any) { m["dst_endpoint"] = map[string]any{"port": 80} }},
		{"version_incompatible_later", "metadata.version", false, func(m map[string]any) { obj(m, "metadata")["version"] = "1.9.0" }},
		{"version_earlier", "metadata.version", true, func(m map[string]any) { obj(m, "metadata")["version"] = "1.3.0" }},
		{"version_incompatible_later", "metadata.version", false, func(m map[string]any) { obj(m, "metadata")["version"] = "1.10.0" }},
		{"version_incompatible_initial_development", "metadata.version", false, func(m map[string]any) { obj(m, "metadata")["version"] = "0.9.0" }},
		{"version_incompatible_prerelease", "metadata.version", false, func(m map[string]any) { obj(m, "metadata")["version"] = "1.8.0-rc.1" }},
		{"version_incompatible_prerelease", "metadata.version", false, func(m map[string]any) { obj(m, "metadata")["version"] = "1.7.0-dev" }},
		// A null is a missing value, as validate_attribute treats nil.
		{"attribute_required_missing", "activity_id", false, func(m map[string]any) { m["activity_id"] = nil }},
		{"class_uid_unknown", "class_uid", false, func(m map[string]any) { m["class_uid"] = 4999 }},
	} {
		t.Run(c.kind+"/"+c.path, func(t *testing.T) {
			r := s.Validate(mutate(t, c.f))
			got := r.Errors
			if c.warning {
				got = r.Warnings
			}
			for _, p := range got {
				if p.Kind == c.kind && p.Path == c.path {
					return
				}
			}
			t.Errorf("want %s at %q (warning %v); errors %v, warnings %v", c.kind, c.path, c.warning, r.Errors, r.Warnings)
		})
	}
}
