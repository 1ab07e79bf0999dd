package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Load reads and parses the policy file at path (YAML or JSON; JSON is
// parsed as YAML). Problems are reported as *Error or Errors carrying the
// file name, line, column and field path. A file that cannot be read gives an
// *Error whose Err is the *fs.PathError.
func Load(path string) (*Policy, error) { return LoadFor(path, HostOS()) }

// LoadFor is Load for a policy whose paths are written for target.
func LoadFor(path string, target OS) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		hint := ""
		if errors.Is(err, fs.ErrNotExist) {
			hint = "check the path, or run without a policy file to use the default policy"
		}
		return nil, &Error{File: path, Msg: "cannot read policy file: " + msg, Hint: hint, Err: err}
	}
	return ParseFor(data, path, target)
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): (.*)$`) })

// Parse parses a policy from data (YAML or JSON). filename is used only in
// error messages. Parse decodes strictly (unknown fields, duplicate keys and
// type mismatches are errors) and then runs the static checks of Validate;
// every problem found is returned, as one *Error or as Errors.
func Parse(data []byte, filename string) (*Policy, error) {
	return ParseFor(data, filename, HostOS())
}

// ParseFor is Parse for a policy whose paths are written for target:
// their syntax, and the defaults of absent fields (DefaultFor(target)).
func ParseFor(data []byte, filename string, target OS) (*Policy, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: filename, Msg: "the policy is empty", Hint: "start the file with \"version: 1\""}
		}
		return nil, yamlError(filename, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: filename, Line: extra.Line, Column: extra.Column, Msg: "the file holds more than one YAML document", Hint: "remove the \"---\" separator and everything after it"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(filename, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, &Error{File: filename, Msg: "the policy is empty", Hint: "start the file with \"version: 1\""}
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, &Error{File: filename, Line: root.Line, Column: root.Column, Msg: "the policy is empty", Hint: "start the file with \"version: 1\""}
	}

	d := &decoder{file: filename, pos: map[string]position{}, bad: map[string]bool{}}
	p := &Policy{os: target}
	d.decode(root, reflect.ValueOf(p).Elem(), "")
	p.file, p.pos = filename, d.pos
	p.fillDefaults()
	if root.Kind != yaml.MappingNode {
		return nil, asError(d.errs)
	}
	errs := d.errs
	if _, ok := d.pos["version"]; !ok && !d.bad["version"] {
		errs = append(errs, &Error{File: filename, Line: root.Line, Column: root.Column, Field: "version",
			Msg: "the policy has no version", Hint: "add \"version: 1\" at the top of the file"})
		d.bad["version"] = true
	}
	for _, e := range p.validate() {
		if !underBad(e.Field, d.bad) {
			errs = append(errs, e)
		}
	}
	if err := asError(errs); err != nil {
		return nil, err
	}
	return p, nil
}

// fillDefaults gives every field the file leaves out the built-in default's
// value, so a policy file states only what it changes: without
// filesystem.read_only the system directories stay readable, without
// filesystem.deny the credential files stay hidden, and each absent
// process.limits field keeps its default (write 0 for "no limit"). Lists
// that are written replace the default list; they are not merged.
func (p *Policy) fillDefaults() {
	def := DefaultFor(p.OS())
	absent := func(field string) bool { _, ok := p.pos[field]; return !ok }
	if absent("filesystem.read_only") {
		p.Filesystem.ReadOnly = def.Filesystem.ReadOnly
	}
	if absent("filesystem.deny") {
		p.Filesystem.Deny = def.Filesystem.Deny
	}
	l, dl := &p.Process.Limits, def.Process.Limits
	if absent("process.limits.memory") {
		l.Memory = dl.Memory
	}
	if absent("process.limits.pids") {
		l.Pids = dl.Pids
	}
	if absent("process.limits.cpu") {
		l.CPU = dl.CPU
	}
	if absent("process.limits.nofile") {
		l.Nofile = dl.Nofile
	}
	if p.OS() == OSWindows {
		// The Windows default's layers are optional and its unix_sockets
		// allow (defaultWindows says why); a Windows file that leaves them
		// out means those, not the Linux defaults.
		if absent("network.unix_sockets") {
			p.Network.UnixSockets = def.Network.UnixSockets
		}
		for _, layer := range AllLayers {
			if absent("layers." + string(layer)) {
				if p.Layers == nil {
					p.Layers = Layers{}
				}
				p.Layers[layer] = def.Layers[layer]
			}
		}
	}
}

// underBad reports whether field or one of its ancestors failed to decode.
func underBad(field string, bad map[string]bool) bool {
	for f := field; ; {
		if bad[f] {
			return true
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			return false
		}
		f = f[:i]
	}
}

func yamlError(filename string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: filename, Msg: "invalid YAML: " + msg, Err: err}
	if m := yamlLineRE().FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "invalid YAML: " + m[2]
	}
	if strings.Contains(msg, "found character that cannot start any token") {
		e.Hint = "YAML does not allow tabs for indentation; use spaces"
	}
	return e
}

// Validate runs the static checks that need no host access: the version,
// path syntax, network mode, limits, layers, environment names,
// run_as_user, credentials (their syntax, and that the network rules let
// the proxy substitute at each endpoint) and the consent ceiling
// (validateConsent). Parse calls it; Resolve calls it again so that a policy built
// in code is checked too. It returns nil, one *Error or Errors.
func (p *Policy) Validate() error {
	return asError(p.validate())
}

// errAt builds an *Error for field, positioned if the policy came from a
// file that set field.
func (p *Policy) errAt(field, msg, hint string) *Error {
	e := &Error{File: p.file, Field: field, Msg: msg, Hint: hint}
	if pos, ok := p.pos[field]; ok {
		e.Line, e.Column = pos.line, pos.col
	}
	return e
}

// errAtKey is errAt pointing at the key of a mapping entry when known.
func (p *Policy) errAtKey(field, msg, hint string) *Error {
	e := p.errAt(field, msg, hint)
	if pos, ok := p.pos[field+keySuffix]; ok {
		e.Line, e.Column = pos.line, pos.col
	}
	return e
}

func (p *Policy) validate() []*Error {
	var errs []*Error
	add := func(e *Error) { errs = append(errs, e) }

	if p.Version != Version {
		if p.Version == 0 {
			add(p.errAt("version", "the policy has no version", "add \"version: 1\" at the top of the file"))
		} else {
			add(p.errAt("version", fmt.Sprintf("unsupported policy version %d", p.Version),
				"this Corral understands version 1 only; write \"version: 1\" or upgrade Corral"))
		}
	}

	fsys := &p.Filesystem
	for _, list := range []struct {
		name  string
		rules []PathRule
	}{{"read_only", fsys.ReadOnly}, {"read_write", fsys.ReadWrite}, {"deny", fsys.Deny}} {
		for i, r := range list.rules {
			field := fmt.Sprintf("filesystem.%s[%d]", list.name, i)
			if msg, hint := p.checkPath(r.Path, false); msg != "" {
				add(p.errAt(field, msg, hint))
			}
		}
	}
	for i, s := range fsys.Protected {
		field := fmt.Sprintf("filesystem.protected[%d]", i)
		if msg, hint := p.checkPath(s, true); msg != "" {
			add(p.errAt(field, msg, hint))
		}
	}

	switch fsys.Git {
	case "", GitReadOnly, GitCommit:
	default:
		add(p.errAt("filesystem.git", fmt.Sprintf("unknown git mode %q", fsys.Git), "use read-only (all of .git read-only) or commit (the agent can commit; hooks and config stay read-only)"))
	}

	switch p.Network.Mode {
	case "", NetworkNone, NetworkHost, NetworkProxy:
	default:
		hint := "use none, proxy or host"
		if s := suggest(string(p.Network.Mode), []string{"none", "host", "proxy"}); s != "" {
			hint = "did you mean " + strconv.Quote(s) + "? " + hint
		}
		add(p.errAt("network.mode", fmt.Sprintf("unknown network mode %q", p.Network.Mode), hint))
	}
	for _, e := range p.validateUnixSockets() {
		add(e)
	}
	for _, e := range p.validateNetwork() {
		add(e)
	}
	for _, e := range p.validateCredentials() {
		add(e)
	}
	for _, e := range p.validateConsent() {
		add(e)
	}
	if p.UI != nil {
		switch p.UI.Clipboard {
		case "", "none", "read", "write", "all":
		default:
			add(p.errAt("ui.clipboard", fmt.Sprintf("unknown clipboard access %q", p.UI.Clipboard), "use none, read, write or all"))
		}
	}

	if p.Docker != nil && p.Docker.Image != "" {
		if msg := checkImageRef(p.Docker.Image); msg != "" {
			add(p.errAt("docker.image", msg, "write a reference such as corral/base:1 or debian:bookworm-slim"))
		}
	}

	env := &p.Process.Env
	for i, name := range env.Pass {
		if msg, hint := EnvPassProblem(name); msg != "" {
			add(p.errAt(fmt.Sprintf("process.env.pass[%d]", i), msg, hint))
		}
	}
	for _, name := range sortedKeys(env.Set) {
		field := "process.env.set." + name
		if msg, hint, inKey := EnvSetProblem(name, env.Set[name]); msg != "" && inKey {
			add(p.errAtKey(field, msg, hint))
		} else if msg != "" {
			add(p.errAt(field, msg, hint))
		}
	}
	if p.OS() == OSWindows {
		// Windows' environment names ignore case: two names that differ
		// only in it are one variable, and which value won would be
		// chance.
		seen := map[string]string{}
		for _, name := range sortedKeys(env.Set) {
			k := strings.ToUpper(name)
			if first, dup := seen[k]; dup {
				add(p.errAtKey("process.env.set."+name, fmt.Sprintf("%s and %s are one variable on Windows (names ignore case)", first, name), "keep one of them"))
			}
			if k == "HOME" && name != "HOME" {
				add(p.errAtKey("process.env.set."+name, name+" cannot be set", "the sandbox's home is its own; remove the entry"))
			}
			seen[k] = name
		}
	}

	if u := p.Process.RunAsUser; u != "" {
		field := "process.run_as_user"
		if uid, err := strconv.ParseInt(u, 10, 64); err == nil {
			if uid == 0 {
				add(p.errAt(field, "running the workload as root (uid 0) is not allowed", "remove run_as_user to run as yourself, or name an unprivileged user"))
			} else if uid < 0 || uid > 1<<32-2 {
				add(p.errAt(field, "uid out of range: "+u, "write a uid between 1 and 4294967294, or a user name"))
			}
		} else if u == "root" {
			add(p.errAt(field, "running the workload as root is not allowed", "remove run_as_user to run as yourself, or name an unprivileged user"))
		} else if strings.ContainsAny(u, ":/ \t\n\x00") {
			add(p.errAt(field, fmt.Sprintf("invalid user name %q", u), "write a user name or a numeric uid"))
		}
	}

	lim := &p.Process.Limits
	const lp = "process.limits."
	if lim.Memory < 0 {
		add(p.errAt(lp+"memory", "memory limit must not be negative", "write a size such as 2G, or 0 for no limit"))
	}
	if lim.Pids < 0 {
		add(p.errAt(lp+"pids", "pids limit must not be negative", "write a count such as 1024, or 0 for no limit"))
	}
	if lim.Nofile < 0 {
		add(p.errAt(lp+"nofile", "nofile limit must not be negative", "write a count such as 4096, or 0 to keep the inherited limit"))
	}
	if lim.CPU < 0 {
		add(p.errAt(lp+"cpu", "cpu limit must be greater than 0", "write a number of cores such as 2 or 0.5, or leave it out for no limit"))
	} else if lim.CPU > 0 && lim.CPU < 0.01 {
		add(p.errAt(lp+"cpu", fmt.Sprintf("cpu limit %g is below the enforceable minimum of 0.01 cores", lim.CPU), "write at least 0.01"))
	}
	if lim.Timeout < 0 {
		add(p.errAt(lp+"timeout", "timeout must not be negative", "write a duration such as 30m, or 0 for none"))
	}

	for _, l := range sortedKeys(p.Layers) {
		field := "layers." + string(l)
		if !knownLayer(l) {
			add(p.errAtKey(field, fmt.Sprintf("unknown layer %q", l), "layers are namespaces, mounts, landlock, seccomp, cgroups"))
			continue
		}
		if r := p.Layers[l]; r != Required && r != Optional {
			add(p.errAt(field, fmt.Sprintf("invalid requirement %q", r), "write required or optional"))
		}
	}
	return errs
}

// checkPath is checkPathSyntax or checkWinPathSyntax, by p.OS().
func (p *Policy) checkPath(s string, allowRelative bool) (msg, hint string) {
	if p.OS() == OSWindows {
		return checkWinPathSyntax(s, allowRelative)
	}
	return checkPathSyntax(s, allowRelative)
}

// checkPathSyntax checks one policy path statically. allowRelative permits
// relative paths (filesystem.protected). It returns an empty msg when the
// path is acceptable.
func checkPathSyntax(s string, allowRelative bool) (msg, hint string) {
	const how = "start it with /, ~/ or {workdir}/"
	switch {
	case s == "":
		return "empty path", "write a path such as /usr or {workdir}/build"
	case strings.ContainsRune(s, 0):
		return "path contains a NUL byte", "remove the NUL byte"
	}
	for _, c := range strings.Split(s, "/") {
		if c == ".." {
			return fmt.Sprintf("path %q contains a \"..\" component", s), "write the path without \"..\"; grants must name their target directly"
		}
	}
	rest := s
	switch {
	case s == "~" || strings.HasPrefix(s, "~/"):
		rest = s[1:]
	case s == "{workdir}" || strings.HasPrefix(s, "{workdir}/"):
		rest = strings.TrimPrefix(s, "{workdir}")
	case strings.HasPrefix(s, "~"):
		return fmt.Sprintf("%q: ~user is not supported", s), "write the absolute path, or ~/... for your own home"
	case strings.HasPrefix(s, "/"):
		if procTrick(path.Clean(s)) {
			return fmt.Sprintf("path %q names a process's /proc entry", s),
				"/proc/self, /proc/thread-self and /proc/<pid> describe the launcher, not the workload; grant the real path instead"
		}
	case strings.HasPrefix(s, "{"):
		return fmt.Sprintf("unknown placeholder in %q", s), "the only placeholder is {workdir}, at the start of the path"
	default:
		if !allowRelative {
			return fmt.Sprintf("relative path %q", s), how + ", e.g. {workdir}/" + strings.TrimPrefix(s, "./")
		}
		if path.Clean(s) == "." {
			return fmt.Sprintf("protected path %q names the writable root itself", s), "name a path inside it, e.g. .git/hooks, or drop read_write on that root"
		}
	}
	if strings.Contains(rest, "{workdir}") {
		return fmt.Sprintf("placeholder in the middle of %q", s), "{workdir} is only expanded at the start of a path"
	}
	return "", ""
}

// procTrick reports whether the clean absolute path p is or lies under
// /proc/self, /proc/thread-self or /proc/<pid>.
func procTrick(p string) bool {
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return false
	}
	first, _, _ := strings.Cut(rest, "/")
	if first == "self" || first == "thread-self" {
		return true
	}
	if first == "" {
		return false
	}
	for _, c := range first {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// sortedKeys returns the keys of m in order.
func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkImageRef returns what is wrong with an image reference, or "". It
// checks the shape only (the grammar is the distribution spec's
// reference.go): no whitespace or control characters, no leading '-' (it
// would read as a flag), no scheme, at most 255 characters for the name.
func checkImageRef(ref string) string {
	switch {
	case strings.HasPrefix(ref, "-"):
		return fmt.Sprintf("image reference %q starts with '-'", ref)
	case strings.Contains(ref, "://"):
		return fmt.Sprintf("image reference %q has a URL scheme", ref)
	case len(ref) > 512:
		return "image reference longer than 512 characters"
	}
	for _, r := range ref {
		if r <= ' ' || r == 0x7f || r > 0x7e {
			return fmt.Sprintf("image reference %q contains whitespace, a control or a non-ASCII character", ref)
		}
	}
	name := ref
	if i := strings.IndexAny(name, "@"); i >= 0 {
		name = name[:i]
	}
	if name == "" || strings.HasSuffix(name, ":") || strings.HasSuffix(name, "/") {
		return fmt.Sprintf("image reference %q is incomplete", ref)
	}
	return ""
}
