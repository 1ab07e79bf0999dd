package policy

import (
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/egress/l7"
)

// Consent is the consent section: the ceiling of what a running workload
// may ask a person for (a folder, a host). Nil: nothing may be asked, and
// no request channel is served. A request outside Ask, inside Never, or
// inside a filesystem.deny / network.deny entry is refused without a
// prompt, with the reason (docs/consent.md).
//
//	consent:
//	  folders: {ask: ["~/src/**"], never: [~/.ssh], access: rw}
//	  hosts:   {ask: ["*.github.com:443"], never: [169.254.169.254]}
//	  timeout: 10m        # pending → expired (a deny)
//	  max_pending: 5
//	  rate: {burst: 5, per: 1m}
//	  persist: ~/.config/corral/grants.local.yaml
//
// Validate checks its syntax and bounds (validateConsent); Resolve makes
// it concrete (ResolvedConsent) and refuses what would let the workload
// reach Corral's own state; AskFolder and AskHost apply it.
type Consent struct {
	Folders *ConsentFolders `json:"folders,omitempty" yaml:"folders"`
	Hosts   *ConsentHosts   `json:"hosts,omitempty" yaml:"hosts"`
	// Timeout is how long a request stays pending before it expires
	// (a deny); default DefaultConsentTimeout, at most MaxConsentTimeout.
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout"`
	// MaxPending bounds the requests pending at once; more are refused
	// (rate_limited). Default DefaultConsentMaxPending, 1 to
	// MaxConsentMaxPending.
	MaxPending int `json:"max_pending,omitempty" yaml:"max_pending"`
	// Rate is a token bucket over new requests (coalesced ones are free);
	// default DefaultConsentBurst per DefaultConsentPer.
	Rate *ConsentRate `json:"rate,omitempty" yaml:"rate"`
	// Persist is the local file of standing ("always") grants; default
	// DefaultConsentPersist. Absolute or "~/"-rooted; it must not be
	// reachable from the sandbox (Resolve refuses one inside the workdir
	// or any grant, or in a directory the workload can write: the
	// workload could plant standing grants, or read the decisions).
	Persist string `json:"persist,omitempty" yaml:"persist"`
}

// ConsentFolders is consent.folders.
type ConsentFolders struct {
	// Ask are path globs a request's canonical path must match: absolute,
	// or rooted at "~" or "{workdir}" (expanded); "*" matches any run of
	// characters within one component, a "**" component any number of
	// components (zero too: "~/src/**" matches ~/src itself); every other
	// character is itself ('?' and '[' too). No "..", no NUL.
	Ask []string `json:"ask" yaml:"ask"`
	// Never are paths never granted: a request at or inside one is
	// refused, and one inside a granted tree is masked.
	Never []string `json:"never,omitempty" yaml:"never"`
	// Access is the most that may be granted: ro (the default) or rw.
	Access Access `json:"access,omitempty" yaml:"access"`
}

// ConsentHosts is consent.hosts (network.mode proxy only: a host grant is
// a proxy rule). Entries are "HOST[:PORT]", HOST as a network.allow
// entry's (an exact name, a "*." or "**." wildcard first label, an IP
// literal or a CIDR, an IPv6 one in brackets when a port follows,
// "[fd00::/8]:*"; a single label other than localhost only in never),
// PORT 1-65535 or "*" for any (default 443): parseConsentHost.
type ConsentHosts struct {
	Ask   []string `json:"ask" yaml:"ask"`
	Never []string `json:"never,omitempty" yaml:"never"`
}

// ConsentRate is consent.rate: Burst new requests, refilled at Burst per
// Per. An absent field takes its default.
type ConsentRate struct {
	Burst int      `json:"burst,omitempty" yaml:"burst"`
	Per   Duration `json:"per,omitempty" yaml:"per"`
}

// Consent defaults and bounds.
const (
	DefaultConsentTimeout    = 10 * time.Minute
	MaxConsentTimeout        = 24 * time.Hour
	DefaultConsentMaxPending = 5
	MaxConsentMaxPending     = 100
	DefaultConsentBurst      = 5
	MaxConsentBurst          = 1000
	DefaultConsentPer        = time.Minute
	DefaultConsentPersist    = "~/.config/corral/grants.local.yaml"
	// DefaultConsentPort is the port of a hosts entry that names none.
	DefaultConsentPort = 443
)

// GrantsDir is where folder grants appear inside the sandbox
// (provider.GrantSlots: /grants/ro and /grants/rw, which policy cannot
// import): a policy with consent.folders may not grant a path at or under
// it (Resolve).
const GrantsDir = "/grants"

// ResolvedConsent is the consent section made concrete (Resolve): globs
// and paths expanded and canonical, defaults filled in.
type ResolvedConsent struct {
	Folders      []ConsentGlob `json:"folders,omitempty"`       // folders.ask
	FolderNever  []ConsentPath `json:"folders_never,omitempty"` // folders.never, canonical
	FolderAccess Access        `json:"folders_access,omitempty"`
	// Deny are the filesystem.deny entries, expanded and canonical as
	// FolderNever (missing ones too: one made later is refused still).
	Deny       []ConsentPath `json:"deny,omitempty"`
	Hosts      []ConsentHost `json:"hosts,omitempty"` // hosts.ask
	HostNever  []ConsentHost `json:"hosts_never,omitempty"`
	Timeout    time.Duration `json:"timeout"`
	MaxPending int           `json:"max_pending"`
	Burst      int           `json:"burst"`
	Per        time.Duration `json:"per"`
	// Persist is the standing grants file, canonical (its nearest
	// existing ancestor resolved), may not exist yet; "" when the home is
	// unknown and consent.persist is not written (no "always" scope).
	Persist string `json:"persist"`
	// State are the canonical directories of Corral's own state (its
	// configuration, state and the persist file's directory) that a
	// folder grant masks, or refuses read-write (consentStateDirs).
	State []string `json:"state,omitempty"`
}

// ConsentGlob is one folders.ask entry: Glob is absolute with its
// literal leading components canonical.
type ConsentGlob struct {
	Glob  string `json:"glob"`
	Field string `json:"field"` // "consent.folders.ask[0]"
}

// ConsentPath is one folders.never (or filesystem.deny) entry: Path canonical (a missing
// path's nearest existing ancestor resolved, the rest kept cleaned).
type ConsentPath struct {
	Path  string `json:"path"`
	Field string `json:"field"` // "consent.folders.never[1]", "filesystem.deny[0]"
}

// ConsentHost is one hosts entry: Host as an Endpoint's (lower case,
// without a trailing dot), Port 0 for any.
type ConsentHost struct {
	Host  string `json:"host"`
	Port  int    `json:"port"`
	Field string `json:"field"`
}

// String is the entry as "host:port", "host:*" for any port, an IPv6
// address or CIDR in brackets (as parseConsentHost reads it back).
func (h ConsentHost) String() string {
	port := "*"
	if h.Port != 0 {
		port = strconv.Itoa(h.Port)
	}
	if strings.Contains(h.Host, ":") {
		return "[" + h.Host + "]:" + port
	}
	return h.Host + ":" + port
}

// FolderCeiling is what the ceiling says of one folder request that may
// be asked (AskFolder).
type FolderCeiling struct {
	Field string // the ask entry that allows it
	// Masks are the canonical paths inside the folder that stay hidden:
	// filesystem.deny entries, consent.folders.never, credential source
	// files, Corral's own state and the persist file (sorted, unique,
	// none above another). A missing one is listed too: the applier masks
	// what exists and refuses the grant when a mask cannot be placed.
	Masks []string
	// ReadOnly are the canonical paths inside the folder that stay
	// read-only in a read-write grant: the protected entries that exist
	// there (as Resolve finds them under a read-write root, git's
	// configuration included) and filesystem.read_only entries inside it
	// (sorted, unique). Empty for a read-only request.
	ReadOnly []string
	// Unprotected are protected paths inside a read-write folder that do
	// not exist (no bind can hold them, as Resolved.Skipped): the
	// workload could create them. For the approver to see, and the scan
	// after the run.
	Unprotected []string
}

// ConsentRefusal is why a request may not even be asked: Field names the
// policy entry that refuses it ("consent.folders.never[1]",
// "filesystem.deny[0]"; "consent.folders.ask" when nothing allows it).
type ConsentRefusal struct {
	Field  string
	Reason string
}

func (e *ConsentRefusal) Error() string { return e.Reason + " (" + e.Field + ")" }

// validateConsent checks the consent section statically: folders.ask
// globs (checkConsentGlob), folders.never paths (checkPathSyntax),
// folders.access, hosts entries (parseConsentHost) and that hosts come
// with network.mode proxy, the bounds of timeout, max_pending and rate,
// and persist's syntax (absolute or "~/", a file).
func (p *Policy) validateConsent() []*Error {
	c := p.Consent
	if c == nil {
		return nil
	}
	if p.OS() == OSWindows {
		return []*Error{p.errNear("consent", "consent is not available for Windows policies yet: the mxc provider cannot change what a running sandbox may reach",
			"remove the consent section; grant the folders and hosts in the policy itself")}
	}
	var errs []*Error
	add := func(e *Error) { errs = append(errs, e) }
	if c.Folders == nil && c.Hosts == nil {
		add(p.errNear("consent", "the consent section names no folders and no hosts: nothing could be asked",
			`add folders: {ask: ["~/src/**"]} or hosts: {ask: ["*.example.com:443"]}, or remove the section`))
	}
	if f := c.Folders; f != nil {
		if len(f.Ask) == 0 {
			add(p.errNear("consent.folders.ask", "consent.folders has no ask globs: no folder could be asked for",
				`add ask: ["~/src/**"] (the folders the workload may ask for), or remove consent.folders`))
		}
		for i, g := range f.Ask {
			if msg, hint := checkConsentGlob(g); msg != "" {
				add(p.errAt(fmt.Sprintf("consent.folders.ask[%d]", i), msg, hint))
			}
		}
		for i, s := range f.Never {
			if msg, hint := checkPathSyntax(s, false); msg != "" {
				add(p.errAt(fmt.Sprintf("consent.folders.never[%d]", i), msg, hint))
			}
		}
		switch f.Access {
		case "", AccessReadOnly, AccessReadWrite:
		default:
			add(p.errAt("consent.folders.access", fmt.Sprintf("access %q is not ro or rw", f.Access), "write ro (grants are read-only, the default) or rw (a person may grant read-write)"))
		}
	}
	if h := c.Hosts; h != nil {
		if mode := p.networkMode(); mode != NetworkProxy {
			add(p.errNear("consent.hosts", fmt.Sprintf("consent.hosts needs network.mode: proxy (it is %s): host grants are proxy rules", mode),
				"set network.mode: proxy, or remove consent.hosts"))
		}
		if len(h.Ask) == 0 {
			add(p.errNear("consent.hosts.ask", "consent.hosts has no ask entries: no host could be asked for",
				`add ask: ["*.example.com:443"], or remove consent.hosts`))
		}
		for _, l := range []struct {
			name    string
			entries []string
		}{{"ask", h.Ask}, {"never", h.Never}} {
			for i, s := range l.entries {
				if _, _, msg, hint := parseConsentHost(s, l.name == "ask"); msg != "" {
					add(p.errAt(fmt.Sprintf("consent.hosts.%s[%d]", l.name, i), msg, hint))
				}
			}
		}
	}
	if p.written("consent.timeout") && c.Timeout == 0 {
		add(p.errAt("consent.timeout", "timeout 0 would expire every request at once", "write a duration such as 10m (the default), at most 24h"))
	} else if time.Duration(c.Timeout) > MaxConsentTimeout {
		add(p.errAt("consent.timeout", fmt.Sprintf("timeout %s is longer than %s", c.Timeout, MaxConsentTimeout), "write a duration such as 10m (the default), at most 24h"))
	} else if c.Timeout < 0 {
		add(p.errAt("consent.timeout", "timeout must not be negative", "write a duration such as 10m"))
	}
	if (p.written("consent.max_pending") || c.MaxPending != 0) && (c.MaxPending < 1 || c.MaxPending > MaxConsentMaxPending) {
		add(p.errAt("consent.max_pending", fmt.Sprintf("max_pending %d is outside 1-%d", c.MaxPending, MaxConsentMaxPending), fmt.Sprintf("write how many requests may wait at once, such as %d (the default)", DefaultConsentMaxPending)))
	}
	if r := c.Rate; r != nil {
		if (p.written("consent.rate.burst") || r.Burst != 0) && (r.Burst < 1 || r.Burst > MaxConsentBurst) {
			add(p.errAt("consent.rate.burst", fmt.Sprintf("burst %d is outside 1-%d", r.Burst, MaxConsentBurst), fmt.Sprintf("write how many new requests may come at once, such as %d (the default)", DefaultConsentBurst)))
		}
		if p.written("consent.rate.per") && r.Per == 0 || r.Per < 0 {
			add(p.errAt("consent.rate.per", "per must be longer than 0", "write the time in which burst requests are refilled, such as 1m (the default)"))
		}
	}
	if s := c.Persist; s != "" || p.written("consent.persist") {
		if msg, hint := checkPersistSyntax(s); msg != "" {
			add(p.errAt("consent.persist", msg, hint))
		}
	}
	return errs
}

// networkMode is network.mode, NetworkNone when it is not written.
func (p *Policy) networkMode() NetworkMode {
	if p.Network.Mode == "" {
		return NetworkNone
	}
	return p.Network.Mode
}

// checkPersistSyntax says what is wrong with a consent.persist path, or
// "": a path (checkPathSyntax) that is absolute or "~/"-rooted, names a
// file (not "~", not ending in "/"), and is not "{workdir}"-rooted (the
// workload writes the workdir: it could plant standing grants).
func checkPersistSyntax(s string) (msg, hint string) {
	if msg, hint := checkPathSyntax(s, false); msg != "" {
		return msg, hint
	}
	switch {
	case s == "{workdir}" || strings.HasPrefix(s, "{workdir}/"):
		return fmt.Sprintf("persist %q is inside the workdir, which the workload can write: it could plant standing grants there", s),
			"keep the standing grants outside every grant, e.g. " + DefaultConsentPersist + " (the default)"
	case s == "~" || s == "/" || strings.HasSuffix(s, "/"):
		return fmt.Sprintf("persist %q names a directory, not a file", s), "name a YAML file, e.g. " + DefaultConsentPersist
	}
	return "", ""
}

// checkConsentGlob says what is wrong with a folders.ask glob, or "": a
// path by checkPathSyntax's rules, a "**" only as a whole component, and
// (for an absolute glob; a "~" or "{workdir}" one is checked by Resolve)
// none that could match a path ceilingForbids.
func checkConsentGlob(g string) (msg, hint string) {
	if msg, hint := checkPathSyntax(g, false); msg != "" {
		return msg, hint
	}
	for _, c := range strings.Split(g, "/") {
		if strings.Contains(c, "**") && c != "**" {
			return fmt.Sprintf("glob %q: ** must be a whole component", g),
				`write "**" alone between slashes (~/src/**/docs: any depth), or "*" for any run of characters within one component (~/src/proj-*)`
		}
	}
	if strings.HasPrefix(g, "/") {
		if msg, hint := ceilingForbids(path.Clean(g), nil, nil); msg != "" {
			return msg, hint
		}
	}
	return "", ""
}

// forbiddenTrees may never be asked for, at or inside: the kernel's
// interfaces (/proc, /sys, /dev: a process's memory, devices) and the
// host's service sockets (/run, /var/run: a read-only grant does not
// stop connect()).
var forbiddenTrees = []string{"/proc", "/sys", "/dev", "/run", "/var/run"}

// ceilingForbids says why the clean absolute glob g could match a
// folder no request may have, or "": "/" (everything), home or a
// directory above it (the real home, whose private copy the sandbox has;
// homes are its forms, as given and canonical), a path at or inside forbiddenTrees, or a path
// at or inside one of state (Corral's own state; its directories above
// are masked instead). The globs are those of folders.ask; one that
// can match such a path would prompt a person with a request that must
// not be granted.
func ceilingForbids(g string, homes, state []string) (msg, hint string) {
	segs := globSegs(g)
	const fix = "ask for the directories the workload needs, such as ~/src/** or ~/Documents/*"
	if l7.MatchSegments(segs, nil) {
		return fmt.Sprintf("glob %q matches /, every file of the host", g), fix
	}
	for _, home := range homes {
		if at := globAtOrAbove(segs, globSegs(home)); at != "" {
			return fmt.Sprintf("glob %q matches %s, which holds your home %s: the whole of it, credentials too, would be one approval away", g, at, home), fix
		}
	}
	for _, t := range forbiddenTrees {
		if globAtOrInside(segs, globSegs(t)) {
			return fmt.Sprintf("glob %q matches %s or a path inside it, the kernel's interfaces or the host's service sockets, which a grant must never expose", g, t), fix
		}
	}
	for _, t := range state {
		if globAtOrInside(segs, globSegs(t)) {
			return fmt.Sprintf("glob %q matches %s or a path inside it, Corral's own state (its standing grants and configuration): a workload granted it could grant itself more", g, t), fix + "; a folder holding the state has it masked"
		}
	}
	return "", ""
}

// parseConsentHost parses a hosts entry "HOST[:PORT|:*]" into a host
// (lower case, no trailing dot) and a port (0: any; DefaultConsentPort
// when none is written). An IPv6 address takes a port only in brackets
// ("[::1]:8443", "[fd00::/8]:*"); without brackets it is the whole host. HOST is checked
// by checkEndpointHost, the network.allow hosts' rule, and for an ask
// entry (ask) a single label other than localhost is refused, as an
// allow entry without single_label.
func parseConsentHost(s string, ask bool) (host string, port int, msg, hint string) {
	const how = `write HOST[:PORT], such as api.github.com, "*.github.com:443", "[2001:db8::1]:8443" or 10.0.0.0/8:*`
	h, p := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Sprintf("%q has no closing ]", s), how
		}
		h, p = s[1:end], s[end+1:]
		if p != "" {
			if !strings.HasPrefix(p, ":") {
				return "", 0, fmt.Sprintf("%q has text after ] that is not :PORT", s), how
			}
			p = p[1:]
			if p == "" {
				return "", 0, fmt.Sprintf("%q has an empty port", s), how
			}
		}
		a, err := netip.ParseAddr(h)
		if pfx, perr := netip.ParsePrefix(h); perr == nil {
			a, err = pfx.Addr(), nil
		}
		if err != nil || !a.Is6() {
			return "", 0, fmt.Sprintf("%q: only an IPv6 address or CIDR goes in brackets", s), how
		}
	case strings.Count(s, ":") == 1:
		h, p, _ = strings.Cut(s, ":")
		if p == "" {
			return "", 0, fmt.Sprintf("%q has an empty port", s), how
		}
	}
	port = DefaultConsentPort
	switch {
	case p == "*":
		port = 0
	case p != "":
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || p[0] == '+' || p[0] == '0' {
			return "", 0, fmt.Sprintf("port %q of %q is not a number from 1 to 65535 or *", p, s), how
		}
		port = n
	}
	if msg, hint := checkEndpointHost(h, false); msg != "" {
		return "", 0, msg, hint
	}
	if ask && singleLabel(h) {
		return "", 0, fmt.Sprintf("%q is a single DNS label: it names no public host, and resolvers complete it with the local search domains or /etc/hosts", h),
			"write the full name, such as " + strings.TrimSuffix(h, ".") + ".example.com"
	}
	return strings.TrimSuffix(asciiLower(h), "."), port, "", ""
}

// withDefaults is c with every default written out (timeout, max_pending,
// rate, persist, folders.access) and its pointers its own: what Hash
// hashes, so that spelling out a default does not change a policy's hash.
func (c Consent) withDefaults() Consent {
	if c.Timeout == 0 {
		c.Timeout = Duration(DefaultConsentTimeout)
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultConsentMaxPending
	}
	rate := ConsentRate{Burst: DefaultConsentBurst, Per: Duration(DefaultConsentPer)}
	if c.Rate != nil {
		if c.Rate.Burst != 0 {
			rate.Burst = c.Rate.Burst
		}
		if c.Rate.Per != 0 {
			rate.Per = c.Rate.Per
		}
	}
	c.Rate = &rate
	if c.Persist == "" {
		c.Persist = DefaultConsentPersist
	}
	if c.Folders != nil {
		f := *c.Folders
		if f.Access == "" {
			f.Access = AccessReadOnly
		}
		c.Folders = &f
	}
	return c
}

// Describe says what the ceiling allows, one line each (`corral policy
// explain`, an approver's prompt): what may be asked and what never, the
// access ceiling, the timeout, the bounds on requests, where standing
// grants are kept and which of Corral's state is never granted.
func (c *ResolvedConsent) Describe() []string {
	var out []string
	if len(c.Folders) > 0 {
		out = append(out, "folders may be asked for (the canonical path must match):")
		for _, g := range c.Folders {
			out = append(out, "  "+g.Glob+"  ("+g.Field+")")
		}
		for _, n := range c.FolderNever {
			out = append(out, "  never "+n.Path+"  ("+n.Field+")")
		}
		out = append(out, "  never: filesystem.deny entries, credential sources, Corral's state ("+strings.Join(c.State, ", ")+"), /, the home or above, /proc, /sys, /dev, /run, /var/run; refused at or inside, masked inside a granted folder")
		access := "read-only only"
		if c.FolderAccess == AccessReadWrite {
			access = "read-write at most (protected paths inside stay read-only; a folder holding Corral's state or a credential source only read-only)"
		}
		out = append(out, "  access: "+access+"; granted folders appear at "+GrantsDir+"/ro/LABEL or "+GrantsDir+"/rw/LABEL")
	} else {
		out = append(out, "folders: none may be asked for")
	}
	if len(c.Hosts) > 0 {
		out = append(out, "hosts may be asked for (through the egress proxy):")
		for _, h := range c.Hosts {
			out = append(out, "  "+h.String()+"  ("+h.Field+")")
		}
		for _, h := range c.HostNever {
			out = append(out, "  never "+h.String()+"  ("+h.Field+")")
		}
		out = append(out, "  never: network.deny entries (also through network.hosts)")
	} else {
		out = append(out, "hosts: none may be asked for")
	}
	out = append(out, fmt.Sprintf("timeout %s (then expired: a deny); at most %d pending; at most %d new requests per %s (over either: rate_limited)", c.Timeout, c.MaxPending, c.Burst, c.Per))
	if c.Persist != "" {
		out = append(out, "standing (always) grants: "+c.Persist)
	} else {
		out = append(out, "standing (always) grants: none (the home is unknown and consent.persist is not set)")
	}
	return out
}
