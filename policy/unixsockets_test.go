//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"strings"
	"testing"
)

func TestUnixSockets(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want UnixSockets
	}{
		{"version: 1\n", DefaultUnixSockets},
		{"version: 1\nnetwork:\n  mode: host\n", DefaultUnixSockets},
		{"version: 1\nnetwork:\n  unix_sockets: deny\n", UnixSocketsDeny},
		{"version: 1\nnetwork:\n  unix_sockets: allow\n", UnixSocketsAllow},
		{"version: 1\nnetwork:\n  mode: proxy\n  unix_sockets: allow\n  allow: [{host: api.example.com}]\n", UnixSocketsAllow},
	} {
		p, err := Parse([]byte(c.yaml), "p.yaml")
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if got := p.Network.UnixSocketsMode(); got != c.want {
			t.Errorf("%q: unix sockets %q, want %q", c.yaml, got, c.want)
		}
		r, err := p.Resolve(Context{Home: t.TempDir(), Workdir: t.TempDir()})
		if err != nil {
			t.Fatalf("%q: resolve: %v", c.yaml, err)
		}
		if got := r.UnixSockets(); got != c.want {
			t.Errorf("%q: resolved unix sockets %q, want %q", c.yaml, got, c.want)
		}
	}
	if got := Default().Network.UnixSocketsMode(); got != DefaultUnixSockets {
		t.Errorf("Default(): %q", got)
	}

	_, err := Parse([]byte("version: 1\nnetwork:\n  unix_sockets: denied\n"), "p.yaml")
	e := only(t, err)
	expectAt(t, e, "network.unix_sockets", 3, 17, `unknown unix_sockets setting "denied"`)
	if !strings.Contains(e.Hint, "deny") {
		t.Errorf("hint %q does not name deny", e.Hint)
	}
	_, err = Parse([]byte("version: 1\nnetwork:\n  unix_sockets: false\n"), "p.yaml")
	expectAt(t, only(t, err), "network.unix_sockets", 3, 17, "expected a string")
	_, err = Parse([]byte("version: 1\nnetwork:\n  unix_socket: deny\n"), "p.yaml")
	expectAt(t, only(t, err), "network.unix_socket", 3, 3, "unknown field")

	// Spelling out the default does not change the hash; the other value does.
	def, _ := Parse([]byte("version: 1\n"), "p.yaml")
	spelt, _ := Parse([]byte("version: 1\nnetwork:\n  unix_sockets: "+string(DefaultUnixSockets)+"\n"), "p.yaml")
	other := UnixSocketsAllow
	if DefaultUnixSockets == UnixSocketsAllow {
		other = UnixSocketsDeny
	}
	changed, _ := Parse([]byte("version: 1\nnetwork:\n  unix_sockets: "+string(other)+"\n"), "p.yaml")
	if Hash(def) != Hash(spelt) {
		t.Error("spelling out the unix_sockets default changed the hash")
	}
	if Hash(def) == Hash(changed) {
		t.Error("unix_sockets: " + string(other) + " did not change the hash")
	}
	if !strings.Contains(string(Schema()), `"unix_sockets"`) {
		t.Error("the schema has no network.unix_sockets")
	}
}
