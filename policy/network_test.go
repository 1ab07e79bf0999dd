package policy

import (
	"strings"
	"testing"
)

// proxyPolicy is a mode-proxy policy whose network.<list> holds the one
// entry given in block style, so that its host is at line 5, column 13 and
// its second key at line 6, column 7.
func proxyPolicy(list, host, more string) []byte {
	src := "version: 1\nnetwork:\n  mode: proxy\n  " + list + ":\n    - host: " + host + "\n"
	if more != "" {
		src += "      " + more + "\n"
	}
	return []byte(src)
}

func TestEndpointHostAccepted(t *testing.T) {
	for _, c := range []struct{ list, host, more string }{
		{"allow", "api.example.com", ""},
		{"allow", `"*.example.com"`, ""},
		{"allow", `"**.example.com"`, ""},
		{"allow", `"**.pkg.dev"`, ""},
		{"allow", `"*.Example.COM."`, ""},
		{"allow", "localhost", ""},
		{"allow", "203.0.113.7", ""},
		{"allow", "10.0.0.0/8", ""},
		{"allow", "::1", ""},
		{"allow", "intranet", "single_label: true"},
		{"allow", "metadata.", "single_label: true"},
		{"deny", "intranet", ""},
		{"deny", "metadata", "ports: [80]"},
		{"deny", `"**.example.com"`, ""},
	} {
		if _, err := Parse(proxyPolicy(c.list, c.host, c.more), "p.yaml"); err != nil {
			t.Errorf("%s %s %s: %v", c.list, c.host, c.more, err)
		}
	}
}

func TestEndpointHostRefused(t *testing.T) {
	const hostField, singleField = "network.%s[0].host", "network.%s[0].single_label"
	for _, c := range []struct {
		list, host, more string
		field            string // hostField or singleField
		msg, hint        string
	}{
		{"allow", `"*"`, "", hostField, "a bare * would allow every host", "list the hosts"},
		{"allow", `"**"`, "", hostField, "a bare ** would allow every host", "list the hosts"},
		{"allow", `"*."`, "", hostField, "a bare * would allow every host", "list the hosts"},
		{"allow", `"**.com"`, "", hostField, "would allow a whole top-level domain", "**.example.com"},
		{"allow", `"*.com"`, "", hostField, "would allow a whole top-level domain", "*.example.com"},
		{"allow", `"***.example.com"`, "", hostField, "a wildcard must be the whole first label", `"**.example.com" any depth`},
		{"allow", `"*x.example.com"`, "", hostField, "a wildcard must be the whole first label", `"*.example.com" matches exactly one label`},
		{"allow", `"x*.example.com"`, "", hostField, "a wildcard must be the whole first label", "only the whole first label"},
		{"allow", `"a**.example.com"`, "", hostField, "a wildcard must be the whole first label", "only the whole first label"},
		{"allow", `"*.*.example.com"`, "", hostField, "wildcard outside the first label", `"**.example.com" any depth`},
		{"allow", `"**.*.example.com"`, "", hostField, "wildcard outside the first label", "only the whole first label"},
		{"allow", `"*.**.example.com"`, "", hostField, "wildcard outside the first label", "only the whole first label"},
		{"allow", `"a.*.example.com"`, "", hostField, "wildcard outside the first label", "only the whole first label"},
		{"allow", `"a.**"`, "", hostField, "wildcard outside the first label", "only the whole first label"},
		{"deny", `"**"`, "", hostField, "a bare ** would allow every host", "list the hosts"},
		{"deny", `"*.*.example.com"`, "", hostField, "wildcard outside the first label", "only the whole first label"},
		{"allow", "intranet", "", hostField, `"intranet" is a single DNS label`, "{host: intranet, single_label: true}"},
		{"allow", "metadata", "ports: [80]", hostField, `"metadata" is a single DNS label`, "single_label: true"},
		{"allow", "API.", "", hostField, `"API." is a single DNS label`, "single_label: true"},
		{"allow", "intranet", "single_label: false", hostField, "single DNS label", "single_label: true"},
		{"allow", "api.example.com", "single_label: true", singleField, "single_label applies only to an allow entry whose host is one label", "remove single_label"},
		{"allow", "localhost", "single_label: true", singleField, "single_label applies only", "remove single_label"},
		{"allow", `"*.example.com"`, "single_label: true", singleField, "single_label applies only", "remove single_label"},
		{"allow", "10.0.0.1", "single_label: true", singleField, "single_label applies only", "remove single_label"},
		{"deny", "intranet", "single_label: true", singleField, "single_label applies only", "remove single_label"},
	} {
		_, err := Parse(proxyPolicy(c.list, c.host, c.more), "p.yaml")
		name := c.list + " " + c.host + " " + c.more
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		e := only(t, err)
		line, col := 5, 13
		if c.field == singleField {
			line, col = 6, 21
		}
		if e.File != "p.yaml" || e.Field != strings.Replace(c.field, "%s", c.list, 1) || e.Line != line || e.Column != col ||
			!strings.Contains(e.Msg, c.msg) || !strings.Contains(e.Hint, c.hint) {
			t.Errorf("%s: got %s:%d:%d %s: %s (hint %q); want p.yaml:%d:%d %s: …%s… (hint …%s…)",
				name, e.File, e.Line, e.Column, e.Field, e.Msg, e.Hint, line, col, strings.Replace(c.field, "%s", c.list, 1), c.msg, c.hint)
		}
	}
}

// Hosts the egress proxy refuses (egress compileRule) are refused here,
// at the host's position, so validation and a run agree; each once passed
// validation and failed the run.
func TestEndpointHostRefusedAsByProxy(t *testing.T) {
	for _, c := range []struct{ list, host, msg, hint string }{
		{"allow", `"fe80::1%lo"`, "has a zone (%lo)", "without the %zone"},
		{"deny", `"fe80::1%eth0"`, "has a zone", "without the %zone"},
		{"allow_private", `"fe80::1%lo"`, "has a zone", "without the %zone"},
		{"allow", `"203.0.113.7."`, "last label starts with a digit", "10.0.0.1"},
		{"deny", `"::1."`, `":" is not a letter`, "::1"},
		{"allow", `"10.0.0.0/8."`, "is not a CIDR", "no trailing dot"},
		{"allow_private", `"127.0.0.1."`, "not an IP address or CIDR", "127.0.0.1/32"},
		{"allow", "127.1", "last label starts with a digit", "without leading zeros"},
		{"deny", "010.0.0.1", "last label starts with a digit", "without leading zeros"},
		{"allow", "example.123", "last label starts with a digit", "full name"},
		{"allow", `"*.10.0.0"`, "last label starts with a digit", "full name"},
		{"allow", strings.Repeat("a.", 127) + "com", "257 bytes long", "real name"},
		{"allow", "\u212a.example.com", "non-ASCII", "xn--"},
		{"allow", `" api.example.com"`, "surrounding whitespace", "remove"},
	} {
		_, err := Parse(proxyPolicy(c.list, c.host, ""), "p.yaml")
		if err == nil {
			t.Errorf("%s %s: accepted", c.list, c.host)
			continue
		}
		e := only(t, err)
		expectAt(t, e, "network."+c.list+"[0].host", 5, 13, c.msg)
		if !strings.Contains(e.Hint, c.hint) {
			t.Errorf("%s %s: hint %q, want …%s…", c.list, c.host, e.Hint, c.hint)
		}
	}
}

// hosts keys must be names, each once without case and trailing dot, and
// values IPs without a zone (the proxy's rules); keys are reported at the
// key, values at the value.
func TestHostsRefusedAsByProxy(t *testing.T) {
	hosts := func(entries string) []byte {
		return []byte("version: 1\nnetwork:\n  mode: proxy\n  hosts:\n    " + entries + "\n")
	}
	for _, c := range []struct {
		entries, field string
		col            int
		msg            string
	}{
		{`x: "fe80::1%lo"`, "network.hosts.x", 8, "has a zone"},
		{`db.internal: nowhere`, "network.hosts.db.internal", 18, "not an IP literal"},
		{`"10.0.0.1": 10.0.0.2`, "network.hosts.10.0.0.1", 5, "last label starts with a digit"},
		{`"10.0.0.0/8": 10.0.0.2`, "network.hosts.10.0.0.0/8", 5, `"/" is not a letter`},
		{`"::1": 10.0.0.2`, "network.hosts.::1", 5, `":" is not a letter`},
		{`"127.1": 10.0.0.2`, "network.hosts.127.1", 5, "last label starts with a digit"},
		{`"*.example.com": 10.0.0.2`, "network.hosts.*.example.com", 5, `"*" is not a letter`},
		{"Example.com: 10.0.0.2\n    example.com: 10.0.0.3", "network.hosts.example.com", 5, `"Example.com" and "example.com" name the same host`},
		{"\"example.com.\": 10.0.0.2\n    example.com: 10.0.0.3", "network.hosts.example.com.", 5, "name the same host"},
	} {
		_, err := Parse(hosts(c.entries), "p.yaml")
		if err == nil {
			t.Errorf("%s: accepted", c.entries)
			continue
		}
		e := only(t, err)
		line := 5
		if strings.Contains(c.entries, "\n") {
			line = 6 // the second key is the duplicate (sorted)
			if c.field == "network.hosts.example.com." {
				line = 5
			}
		}
		expectAt(t, e, c.field, line, c.col, c.msg)
	}
	if _, err := Parse(hosts(`db.internal: 10.0.0.5`+"\n    "+`"api.example.com.": "::1"`), "p.yaml"); err != nil {
		t.Errorf("names to IPs: %v", err)
	}
}
