//go:build linux

package linux

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/corral-sandbox/corral/internal/grants"
	"github.com/corral-sandbox/corral/internal/trustfile"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// The consent channel (provider.ConsentChannel): a sandbox whose policy
// has a consent section and whose network namespace is its own gets a
// TCP listener at 127.0.0.1:provider.ConsentPort inside, made by init
// (like the egress proxy's) and handed to the supervisor, which serves
// it; Landlock lets the workload connect there (and nowhere else but the
// proxy), CORRAL_CONSENT_URL names it and ConsentDocPath, a read-only
// file, says how to ask. With network host there is no channel: a
// listener on the host's loopback would be every host process's (and
// every sandbox's at one port), so Map warns and nothing is served; grants
// decided outside still apply. The requester of a connection is named
// from the kernel's tables (ConsentPeer), never from what it sends.

// ConsentURL is what provider.ConsentURLEnv says inside:
// "http://127.0.0.1:3129".
func ConsentURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(provider.ConsentPort))
}

// consentDoc is ConsentDocPath's text for a sandbox with slots or none.
func consentDoc(slots bool) string {
	u := ConsentURL()
	var b strings.Builder
	b.WriteString("# Asking for more access\n\n")
	b.WriteString("This sandbox lets you ask a person for a folder or a host while you run.\n")
	b.WriteString("The API is HTTP/JSON at $" + provider.ConsentURLEnv + " (" + u + "); only a person decides.\n\n")
	if slots {
		b.WriteString("Ask for a host folder, read-only (\"ro\", the default) or read-write (\"rw\"):\n\n")
		b.WriteString("    curl -s -X POST $" + provider.ConsentURLEnv + "/v1/requests -d '{\"kind\":\"folder\",\"target\":\"/home/me/src/lib\",\"access\":\"ro\",\"reason\":\"read the library's sources\"}'\n\n")
	}
	b.WriteString("Ask for a host (with network proxy):\n\n")
	b.WriteString("    curl -s -X POST $" + provider.ConsentURLEnv + "/v1/requests -d '{\"kind\":\"host\",\"target\":\"api.github.com:443\",\"reason\":\"fetch the release\"}'\n\n")
	b.WriteString("The answer is {\"id\":...,\"state\":\"pending\"}. Wait for the decision (up to 300 s per call; ask again while pending):\n\n")
	b.WriteString("    curl -s \"$" + provider.ConsentURLEnv + "/v1/requests/ID/wait?timeout=60\"\n\n")
	if slots {
		b.WriteString("An approved folder appears at /grants/ro/<label> or /grants/rw/<label> (the answer's \"path\") once \"effective\" is true;\n")
		b.WriteString("it keeps no host path. `curl -s $" + provider.ConsentURLEnv + "/v1/grants` lists them. A revoked one disappears.\n")
	}
	b.WriteString("A request outside what the policy allows, or made with nobody there to answer, is refused at once, with the reason.\n")
	return b.String()
}

// planConsent adds what r's consent section needs to spec (Map): the
// grant slots (MountGrants, with Landlock read-only on provider.GrantSlotRO
// and read-write on GrantSlotRW) when it has folders, and the consent
// channel (ConsentPort, its Landlock connect port, ConsentURLEnv) when
// the sandbox has its own network namespace. It returns what is lost.
func planConsent(r *policy.Resolved, spec *InitSpec) []provider.Loss {
	c := r.Consent
	if c == nil {
		return nil
	}
	var loss []provider.Loss
	add := func(sev provider.Severity, field, format string, args ...any) {
		loss = append(loss, provider.Loss{Severity: sev, Area: "filesystem", Field: field, Message: fmt.Sprintf(format, args...)})
	}
	// The slot and the note live in the sandbox's state directory, which
	// no grant may show (as for the trust and credential files).
	if err := refuseStateGrant(r); err != nil && !r.InspectsEgress() && !hasCredentialFiles(r) {
		add(provider.SeverityError, stateGrant(r, StateBase()).Field, "%s", err.Error())
	}
	if len(c.Folders) > 0 {
		if g := slotsGrant(r); g.Path != "" {
			add(provider.SeverityError, g.Field, "%s (%s) covers %s, where the folders the workload may ask for (consent.folders) appear: narrow the rule so that it leaves %s alone", g.Path, g.Access, provider.GrantSlots, provider.GrantSlots)
		} else {
			spec.Mounts = append(slices.Clip(spec.Mounts), MountSpec{Kind: MountGrants, Path: provider.GrantSlots, Dir: true, ReadOnly: true, Field: "consent.folders (grant slots)"})
			spec.Landlock.RODirs = append(slices.Clip(spec.Landlock.RODirs), provider.GrantSlotRO)
			spec.Landlock.RWDirs = append(slices.Clip(spec.Landlock.RWDirs), provider.GrantSlotRW)
			add(provider.SeverityInfo, "consent.folders", "a folder granted while the sandbox runs appears at %s/<label> (read-only) or %s/<label>, mounted from outside by propagation: the kernel keeps a read-only grant read-only and its masks in place even for a process with every capability in the sandbox", provider.GrantSlotRO, provider.GrantSlotRW)
		}
	}
	if !spec.NewNet {
		loss = append(loss, provider.Loss{Severity: provider.SeverityWarning, Area: "network", Field: "consent",
			Message: fmt.Sprintf("network host: the consent channel needs the sandbox's own network namespace (a listener at 127.0.0.1:%d would be every host process's), so none is served and the workload cannot ask; grants decided outside still apply (use network none or proxy)", provider.ConsentPort)})
		return loss
	}
	spec.ConsentPort = provider.ConsentPort
	spec.Landlock.ConnectPorts = append(slices.Clip(spec.Landlock.ConnectPorts), provider.ConsentPort)
	spec.Env = provider.WithEnv(spec.Env, []string{provider.ConsentURLEnv + "=" + ConsentURL()})
	if g := r.Covering(ConsentDocPath); g.Path != "" {
		add(provider.SeverityInfo, g.Field, "%s (%s) covers %s: the sandbox gets no note on how to ask (%s still names the channel)", g.Path, g.Access, ConsentDocPath, provider.ConsentURLEnv)
	}
	return loss
}

// slotsGrant is the grant of r that shows provider.GrantSlots or
// something below it, or none.
func slotsGrant(r *policy.Resolved) policy.PathGrant {
	if r.Visible(provider.GrantSlots) {
		return r.Covering(provider.GrantSlots)
	}
	for _, g := range r.Grants {
		if g.Access != policy.AccessDeny && policy.Within(g.Path, provider.GrantSlots) {
			return g
		}
	}
	return policy.PathGrant{}
}

// consentDocSpec writes ConsentDocPath's text to state directory dir and
// returns a copy of spec that binds it read-only there (as a credential
// file is: in the sandbox's own tree), unless a grant of r covers it.
func consentDocSpec(spec *InitSpec, r *policy.Resolved, dir string) (*InitSpec, error) {
	if spec.ConsentPort == 0 || r.Covering(ConsentDocPath).Path != "" {
		return spec, nil
	}
	src := dir + "/CONSENT.md"
	if err := trustfile.Create(src, []byte(consentDoc(spec.slots()))); err != nil {
		return nil, provider.Wrap(provider.CodeProvisionFailed, "linux: "+ConsentDocPath, err)
	}
	cp := *spec
	cp.Mounts = append(slices.Clip(cp.Mounts), MountSpec{Kind: MountCredential, Path: ConsentDocPath, Source: src, ReadOnly: true, HostClone: os.Getuid() == 0,
		Field: "builtin (consent: how to ask)"})
	cp.Landlock.ROFiles = append(slices.Clip(cp.Landlock.ROFiles), ConsentDocPath)
	return &cp, nil
}

// ConsentListener is the consent channel's listener inside the sandbox
// (127.0.0.1:provider.ConsentPort in its network namespace), nil without
// one (provider.ConsentChannel).
func (s *Sandbox) ConsentListener() net.Listener { return s.consent }

// ConsentPeer names the process behind c, a connection accepted on
// ConsentListener (provider.PeerResolver): its host pid and executable,
// from the kernel's tables (the sandbox's /proc/net/tcp and its
// processes' fds), never from what it sent.
func (s *Sandbox) ConsentPeer(c net.Conn) (int, string, bool) { return consentPeer(s.initPID, c) }

// consentPeer names the process behind c in the namespaces of init
// (initPID): grants.TCPPeer of c's remote and local addresses.
func consentPeer(initPID int, c net.Conn) (pid int, exe string, ok bool) {
	remote, ok1 := c.RemoteAddr().(*net.TCPAddr)
	local, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, "", false
	}
	return grants.TCPPeer(initPID, remote, local)
}
