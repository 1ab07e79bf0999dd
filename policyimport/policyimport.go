// Package policyimport translates another sandbox's configuration into a
// Corral policy (version 1) and a loss report of what did not carry over.
//
// Sources (Source): srt (Anthropic sandbox-runtime settings JSON), codex
// (an OpenAI Codex CLI config.toml), openshell (an NVIDIA OpenShell
// sandbox policy YAML) and openclaw (an OpenClaw configuration's sandbox
// settings, JSON5). Each importer starts from Corral's built-in default
// policy — system directories read-only, the working directory
// read-write with the protected names read-only, no network, scrubbed
// environment, limits, every layer required — and adds what the source
// grants and denies. The YAML it writes names, in a comment beside each
// entry, the source file, line and key it came from; it always parses
// as a valid policy (Import checks it with policy.Parse).
//
// The loss report (Result.Losses) says what did not map and why, each
// with the source line:
//   - info: carried over with a difference that keeps Corral at least as
//     strict (a path already unreachable, a default Corral already has);
//   - warning: Corral is stricter than the source (a read the source
//     allowed, a port, a per-binary rule applied to every binary): the
//     workload may need an entry added;
//   - error: Corral would allow what the source denies (a glob deny,
//     a rule Corral cannot express). HasErrors reports them; `corral
//     policy import` then writes nothing unless told to accept them.
package policyimport

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/corral-sandbox/corral/policy"
)

// Source is a configuration format Import reads.
type Source string

// The sources.
const (
	SRT       Source = "srt"
	Codex     Source = "codex"
	OpenShell Source = "openshell"
	OpenClaw  Source = "openclaw"
)

// Sources are the formats Import reads, in the order the CLI lists them.
var Sources = []Source{SRT, Codex, OpenShell, OpenClaw}

// Severity of a Loss.
type Severity string

// The severities (see the package doc).
const (
	Info    Severity = "info"
	Warning Severity = "warning"
	Error   Severity = "error"
)

// Loss is one thing that did not carry over exactly: Key is the source's
// key path ("filesystem.denyRead[2]"), Line its line in the source (0:
// not known), Message what happened and what to do.
type Loss struct {
	Severity Severity `json:"severity"`
	Key      string   `json:"key"`
	Line     int      `json:"line,omitempty"`
	Message  string   `json:"message"`
}

// Result is an imported policy: YAML, a policy file, and its loss report.
type Result struct {
	YAML   []byte `json:"-"`
	Losses []Loss `json:"losses"`
}

// HasErrors reports whether a loss makes the policy looser than the source.
func (r *Result) HasErrors() bool {
	for _, l := range r.Losses {
		if l.Severity == Error {
			return true
		}
	}
	return false
}

// Import translates data, the contents of the file named file (used in
// comments and errors), from src. An error is a source that does not
// parse (with file:line:col where known) or an unknown src.
func Import(src Source, file string, data []byte) (*Result, error) {
	b := newBuilder(src, file)
	var err error
	switch src {
	case SRT:
		err = importSRT(b, data)
	case Codex:
		err = importCodex(b, data)
	case OpenShell:
		err = importOpenShell(b, data)
	case OpenClaw:
		err = importOpenClaw(b, data)
	default:
		return nil, fmt.Errorf("unknown source %q (want one of %s)", src, sourceList())
	}
	if err != nil {
		return nil, err
	}
	out := b.yaml()
	// Every source is a Linux sandbox's: the policy is for Linux, on any host.
	if _, perr := policy.ParseFor(out, file+" (imported)", policy.OSLinux); perr != nil {
		return nil, fmt.Errorf("internal error: the imported policy does not parse: %v\n%s", perr, out)
	}
	sort.SliceStable(b.losses, func(i, j int) bool { return b.losses[i].Line < b.losses[j].Line })
	return &Result{YAML: out, Losses: b.losses}, nil
}

func sourceList() string {
	s := make([]string, len(Sources))
	for i, x := range Sources {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// entry is one list item of the output with where it came from.
type entry struct {
	value    string // YAML scalar or flow mapping, written as is
	from     string // "file:line key", the comment; "" for Corral's own
	optional bool
}

// builder accumulates the output policy, starting from Corral's default.
type builder struct {
	src  Source
	file string

	readOnly, readWrite, deny, protected []entry
	includeWorkdir                       *entry // nil: true (default)
	netMode                              entry
	allow, denyHosts, allowPrivate       []entry
	allowed                              []hostPorts // the allow entries written
	unixSockets                          *entry
	envPass                              []entry
	envSet                               []entry // "KEY: value"
	limits                               map[string]entry
	comments                             []string // header lines
	losses                               []Loss
}

func newBuilder(src Source, file string) *builder {
	b := &builder{src: src, file: file, limits: map[string]entry{}}
	d := policy.Default()
	for _, r := range d.Filesystem.ReadOnly {
		b.readOnly = append(b.readOnly, entry{value: quote(r.Path), optional: r.Optional})
	}
	for _, r := range d.Filesystem.Deny {
		b.deny = append(b.deny, entry{value: quote(r.Path), optional: r.Optional})
	}
	for _, p := range policy.DefaultProtected {
		b.protected = append(b.protected, entry{value: quote(p)})
	}
	b.netMode = entry{value: string(policy.NetworkNone)}
	for _, e := range policy.DefaultEnvPass {
		b.envPass = append(b.envPass, entry{value: quote(e)})
	}
	return b
}

// at is the comment naming the source line and key.
func (b *builder) at(line int, key string) string {
	if line > 0 {
		return fmt.Sprintf("%s %s:%d %s", b.src, filepath.Base(b.file), line, key)
	}
	return fmt.Sprintf("%s %s %s", b.src, filepath.Base(b.file), key)
}

func (b *builder) loss(sev Severity, line int, key, f string, a ...any) {
	b.losses = append(b.losses, Loss{Severity: sev, Key: key, Line: line, Message: fmt.Sprintf(f, a...)})
}

// addPath adds p (a Corral path, from corralPath, so one the policy
// accepts) to list unless it is there already.
func addPath(list *[]entry, p string, optional bool, from string) {
	v := quote(p)
	for i, e := range *list {
		if e.value == v {
			if (*list)[i].from == "" {
				(*list)[i].from = from
			}
			return
		}
	}
	*list = append(*list, entry{value: v, optional: optional, from: from})
}

// dropPath removes Corral path p from list; it reports whether it was there.
func dropPath(list *[]entry, p string) bool {
	v := quote(p)
	for i, e := range *list {
		if e.value == v {
			*list = append((*list)[:i], (*list)[i+1:]...)
			return true
		}
	}
	return false
}

// setNetwork sets the network mode; the comment names the first source
// line that asked for it.
func (b *builder) setNetwork(mode policy.NetworkMode, from string) {
	if b.netMode.value == string(mode) && b.netMode.from != "" {
		return
	}
	b.netMode = entry{value: string(mode), from: from}
}

// The network lists endpoint adds to.
const (
	listAllow        = "allow"
	listDeny         = "deny"
	listAllowPrivate = "allow_private"
)

// hostPorts is an allow entry as written: its host and ports (none: 80
// and 443).
type hostPorts struct {
	host  string
	ports []int
}

// endpoint adds {host, ports, extra} to network list kind (listAllow,
// listDeny, listAllowPrivate) after checking host and ports with the
// policy's own rules (policy.EndpointHostProblem, PortProblem). A value
// the policy refuses is left out with a loss at line and key: a warning
// for an allow or allow_private entry (Corral is then stricter), an
// error for a deny entry (what it denied may be allowed). An allow host
// of one label gets single_label: true (the source named it, so it is
// meant), with an info loss. It reports whether the entry was added.
func (b *builder) endpoint(kind, host string, ports []int, extra string, line int, key string) bool {
	msg, _ := policy.EndpointHostProblem(host, kind == listAllowPrivate)
	for _, p := range ports {
		if msg == "" {
			msg, _ = policy.PortProblem(p)
		}
	}
	if msg != "" {
		if kind == listDeny {
			b.loss(Error, line, key, "Corral cannot deny this: %s; hosts it matches may stay allowed", msg)
		} else {
			b.loss(Warning, line, key, "not imported: %s", msg)
		}
		return false
	}
	if kind == listAllow && policy.IsSingleLabel(host) {
		extra = strings.TrimPrefix(extra+", single_label: true", ", ")
		b.loss(Info, line, key, "%s is a single DNS label: written with single_label: true (resolvers complete it with the local search domains or /etc/hosts)", host)
	}
	v := "host: " + quote(host)
	if len(ports) > 0 {
		ps := make([]string, len(ports))
		for i, p := range ports {
			ps[i] = strconv.Itoa(p)
		}
		v += ", ports: [" + strings.Join(ps, ", ") + "]"
	}
	if extra != "" {
		v += ", " + extra
	}
	list := map[string]*[]entry{listAllow: &b.allow, listDeny: &b.denyHosts, listAllowPrivate: &b.allowPrivate}[kind]
	for _, e := range *list {
		if e.value == "{"+v+"}" {
			return true
		}
	}
	*list = append(*list, entry{value: "{" + v + "}", from: b.at(line, key)})
	if kind == listAllow {
		b.allowed = append(b.allowed, hostPorts{host, ports})
	}
	return true
}

// passEnv adds name (a variable or a prefix ending in "*") to
// process.env.pass, unless the policy refuses it (policy.EnvPassProblem):
// then it is left out with a warning at line and key.
func (b *builder) passEnv(name string, line int, key string) bool {
	if msg, _ := policy.EnvPassProblem(name); msg != "" {
		b.loss(Warning, line, key, "not passed: %s", msg)
		return false
	}
	v := quote(name)
	for _, e := range b.envPass {
		if e.value == v {
			return true
		}
	}
	b.envPass = append(b.envPass, entry{value: v, from: b.at(line, key)})
	return true
}

// setEnv adds name: value to process.env.set, unless the policy refuses
// it (policy.EnvSetProblem): then it is left out with a warning at line
// and key.
func (b *builder) setEnv(name, value string, line int, key string) {
	if msg, _, _ := policy.EnvSetProblem(name, value); msg != "" {
		b.loss(Warning, line, key, "not set: %s", msg)
		return
	}
	b.envSet = append(b.envSet, entry{value: quote(name) + ": " + quote(value), from: b.at(line, key)})
}

// quote is s as a YAML double-quoted scalar (JSON string syntax, which
// YAML accepts).
func quote(s string) string { return strconv.Quote(s) }

// yaml writes the policy file.
func (b *builder) yaml() []byte {
	var w strings.Builder
	fmt.Fprintf(&w, "# Corral policy imported from %s (%s) by `corral policy import`.\n", filepath.Base(b.file), b.src)
	w.WriteString("# It starts from Corral's built-in default (corral policy default); each\n")
	w.WriteString("# entry that came from the source names its line. Check it with\n")
	w.WriteString("# `corral policy validate FILE` and `corral policy explain FILE`.\n")
	for _, c := range b.comments {
		w.WriteString("# " + clean(c) + "\n")
	}
	w.WriteString("version: 1\nfilesystem:\n")
	list := func(indent, key string, es []entry) {
		if len(es) == 0 {
			fmt.Fprintf(&w, "%s%s: []\n", indent, key)
			return
		}
		fmt.Fprintf(&w, "%s%s:\n", indent, key)
		for _, e := range es {
			v := e.value
			if e.optional {
				v = "{path: " + v + ", optional: true}"
			}
			fmt.Fprintf(&w, "%s  - %s%s\n", indent, v, comment(e.from))
		}
	}
	list("  ", "read_only", b.readOnly)
	list("  ", "read_write", b.readWrite)
	list("  ", "deny", b.deny)
	if b.includeWorkdir != nil {
		fmt.Fprintf(&w, "  include_workdir: %s%s\n", b.includeWorkdir.value, comment(b.includeWorkdir.from))
	} else {
		w.WriteString("  include_workdir: true\n")
	}
	list("  ", "protected", b.protected)
	fmt.Fprintf(&w, "network:\n  mode: %s%s\n", b.netMode.value, comment(b.netMode.from))
	if b.netMode.value == string(policy.NetworkProxy) {
		list("  ", "allow", b.allow)
		if len(b.denyHosts) > 0 {
			list("  ", "deny", b.denyHosts)
		}
		if len(b.allowPrivate) > 0 {
			list("  ", "allow_private", b.allowPrivate)
		}
	}
	if b.unixSockets != nil {
		fmt.Fprintf(&w, "  unix_sockets: %s%s\n", b.unixSockets.value, comment(b.unixSockets.from))
	}
	w.WriteString("process:\n  env:\n")
	list("    ", "pass", b.envPass)
	if len(b.envSet) > 0 {
		w.WriteString("    set:\n")
		for _, e := range b.envSet {
			fmt.Fprintf(&w, "      %s%s\n", e.value, comment(e.from))
		}
	}
	if len(b.limits) > 0 {
		w.WriteString("  limits:\n")
		keys := make([]string, 0, len(b.limits))
		for k := range b.limits {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&w, "    %s: %s%s\n", k, b.limits[k].value, comment(b.limits[k].from))
		}
	}
	return []byte(w.String())
}

func comment(from string) string {
	if from == "" {
		return ""
	}
	return "  # " + clean(from)
}

// clean is s with every control or line-breaking character a space: a
// source's keys are its author's, and a line break would end the comment.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return ' '
		}
		return r
	}, s)
}

// hasGlob reports whether p has a glob metacharacter.
func hasGlob(p string) bool { return strings.ContainsAny(p, "*?[{") }

// corralPath is p, a path as the source writes it relative to the
// working directory (".", "src/", "./x", "~/x", "/abs"), as a Corral
// policy path ("{workdir}", "{workdir}/src", "~/x", "/abs"); ok is false
// for what has no Corral form: a glob, a ".." that would climb out of the
// working directory or the home (the home's parent is not known here),
// an empty path, or one the policy refuses (policy.PathProblem: a
// /proc/self path, a NUL, a placeholder).
func corralPath(p string) (string, bool) {
	p = strings.TrimSpace(p)
	if p == "" || hasGlob(p) {
		return "", false
	}
	var c string
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		if climbs(p[1:]) { // "~/../x", "~/../~/x": not under the home
			return "", false
		}
		c = path.Clean(p)
	case strings.HasPrefix(p, "/"):
		c = path.Clean(p)
	default:
		c = path.Clean(p)
		switch {
		case c == ".." || strings.HasPrefix(c, "../"):
			return "", false
		case c == ".":
			c = "{workdir}"
		default:
			c = "{workdir}/" + c
		}
	}
	if msg, _ := policy.PathProblem(c, false); msg != "" {
		return "", false
	}
	return c, true
}

// climbs reports whether slash path rest, taken below some directory,
// leaves it with a ".." ("/../x", "/a/../../x").
func climbs(rest string) bool {
	depth := 0
	for _, c := range strings.Split(rest, "/") {
		switch c {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// under reports whether p is at or under root (both clean, slash paths).
func under(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// reachable reports whether a read of Corral path p is possible under the
// policy built so far: under the working directory (when granted) or a
// read-only or read-write entry (the builder starts with the default's
// system directories among them).
func (b *builder) reachable(p string) bool {
	if under(p, "{workdir}") {
		return b.includeWorkdir == nil || b.includeWorkdir.value == "true"
	}
	for _, list := range [][]entry{b.readOnly, b.readWrite} {
		for _, e := range list {
			if s, err := strconv.Unquote(e.value); err == nil && under(p, s) {
				return true
			}
		}
	}
	return false
}

// refusedRW reports whether Corral refuses Corral path p read-write: the
// home itself, or what policy.DangerousForWrite names (the root, /tmp,
// /var/tmp, system trees; docs/policy.md): the importer then leaves it
// out with a loss instead of writing a policy that fails when resolved.
func refusedRW(p string) bool { return p == "~" || policy.DangerousForWrite(p) }

// mergedUsrLinks are the default's system directories that a merged-/usr
// host (Debian 12, Ubuntu 22.04 and later, Fedora, Arch; the images of
// the container-based sources) has as links into /usr: granting them
// grants nothing /usr does not. The ELF loader (/lib64/ld-linux-x86-64.so.2)
// and /bin/sh are found through them.
var mergedUsrLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// containerSystem maps the system directories of a source whose sandbox
// is a container (OpenShell, OpenClaw): the workload there reads its
// image's system software and configuration, and under Corral, which has
// no image, the host's. shown are the directories the source shows it
// (OpenShell's baseline, /usr /lib /etc; for OpenClaw, whose container
// reads its whole image, /usr and /etc). /opt, add-on software rather than
// the system, is not granted unless the source lists it (an entry added
// later puts it back). The mapping is reported once, as info with the
// reason docs/policy.md gives ("Importing another sandbox's
// configuration"): it is the same for every file of the source, the
// host's directories take the image's place read-only with the
// credential files denied, and an error no file can avoid would teach
// --accept-loss, which hides the errors a file can fix.
func (b *builder) containerSystem(line int, key, image string, shown []string) {
	dropPath(&b.readOnly, "/opt")
	var links []string
	for _, l := range mergedUsrLinks {
		if !slices.ContainsFunc(shown, func(s string) bool { return under(l, s) }) {
			links = append(links, l)
		}
	}
	b.loss(Info, line, key, "Corral grants the host's %s read-only in place of %s, with /etc/shadow, /etc/gshadow, /etc/sudoers and /etc/ssh denied (deny what else of the host's /etc must stay hidden); also %s, links into /usr on a merged-/usr host; /opt is not granted unless listed (docs/policy.md)",
		strings.Join(shown, ", "), image, strings.Join(links, ", "))
}
