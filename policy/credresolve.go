package policy

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// credentials makes the policy's credentials concrete for out (its home
// and grants known) and returns them with the variables they expose
// (name -> placeholder). It refuses, at the field concerned, what would
// let the workload have a value: a source variable that process.env
// passes or sets into the sandbox under its own name (unless a
// placeholder takes that name: then the placeholder wins, resolveEnv), a
// source file the sandbox can see or whose directory it can write, and
// an exposed file inside a grant (the provider makes it in the sandbox's
// own tree). A source file that is missing is not refused here: the
// session reads every source at start and names the credential.
func (r *resolver) credentials(out *Resolved) ([]ResolvedCredential, map[string]string) {
	p := r.p
	if len(p.Credentials) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	files := map[string]int{}
	res := make([]ResolvedCredential, 0, len(p.Credentials))
	exposes := map[string]bool{} // a placeholder takes the place of a passed variable of its name
	for _, c := range p.Credentials {
		exposes[c.Expose.Env] = c.Expose.Env != ""
	}
	for i, c := range p.Credentials {
		f := fmt.Sprintf("credentials[%d]", i)
		rc := ResolvedCredential{Credential: c.withDefaults(), Field: f}
		if name := c.Source.Env; name != "" && !exposes[name] {
			if k := passIndexFor(p.OS(), p.Process.Env, name); k >= 0 {
				by := fmt.Sprintf("the default process.env.pass (%s)", defaultEnvPass(p.OS())[k])
				if p.Process.Env.Pass != nil {
					by = fmt.Sprintf("process.env.pass[%d] (%s)", k, p.Process.Env.Pass[k])
				}
				r.fail(f+".source.env", fmt.Sprintf("%s passes %s into the sandbox: the workload would read this credential's real value", by, name),
					fmt.Sprintf("remove it from process.env.pass, or expose the placeholder under that name (expose: {env: %s}), which takes its place", name), nil)
			}
			if _, set := p.Process.Env.Set[name]; set {
				r.fail(f+".source.env", fmt.Sprintf("process.env.set gives the sandbox %s, the variable this credential's value is read from", name),
					"remove "+name+" from process.env.set", nil)
			}
		}
		if c.Source.File != "" {
			if written, ok := r.expand(f+".source.file", c.Source.File); ok {
				rc.SourceFile = canonicalOrNearest(written)
				r.checkSourceFile(f+".source.file", out, written, rc.SourceFile)
			}
		}
		if x := c.Expose.File; x != "" {
			file := x
			if rest, ok := strings.CutPrefix(x, "~/"); ok {
				file = ""
				if r.home == "" {
					r.fail(f+".expose.file", fmt.Sprintf("%q uses ~ but the home directory is unknown", x), "set HOME, or write an absolute path", nil)
				} else {
					file = filepath.Join(r.home, rest)
				}
			}
			if file != "" {
				rc.File = file
				r.checkExposeFile(f+".expose.file", out, file)
				if k, dup := files[file]; dup {
					r.fail(f+".expose.file", fmt.Sprintf("credentials[%d] exposes %s too", k, file), "expose each credential in its own file", nil)
				}
				files[file] = i
			}
		}
		if ph, kept := r.ctx.Placeholders[c.Name]; kept {
			rc.Placeholder = ph
			if msg := checkKeptPlaceholder(ph); msg != "" {
				r.fail(f, fmt.Sprintf("the placeholder kept for credential %q %s", c.Name, msg), "a recovered sandbox keeps the placeholder it was made with; this one is not one corral draws (recreate the sandbox)", nil)
				rc.Placeholder = "" // compared with no other
			}
		} else {
			rc.Placeholder = drawPlaceholder(rc.Shape)
		}
		for _, prev := range res {
			if prev.Placeholder == "" || rc.Placeholder == "" {
				continue
			}
			if strings.Contains(prev.Placeholder, rc.Placeholder) || strings.Contains(rc.Placeholder, prev.Placeholder) {
				// The proxy tells credentials apart by their placeholders.
				r.fail(f, fmt.Sprintf("the placeholders of %s (%q) and %s (%q) are the same or one holds the other", prev.Field, prev.Name, f, c.Name), "recreate the sandbox, so that each credential draws its own", nil)
			}
		}
		if c.Expose.Env != "" {
			env[c.Expose.Env] = rc.Placeholder
		}
		res = append(res, rc)
	}
	return res, env
}

// checkSourceFile refuses a source file the sandbox can see (as written,
// written, or where it leads, canon) or replace (its directory writable).
func (r *resolver) checkSourceFile(field string, out *Resolved, written, canon string) {
	r.checkHostFile(field, out, written, canon, "read the value", "choose the value")
}

// checkHostFile refuses a file of the host's that the sandbox must not
// reach (a credential's source, consent's standing grants): one it can
// see (as written, written, or where it leads, canon), one that is
// missing where it could make it, and one in a directory it can write
// (it could put another in its place). read and plant say what the
// workload would gain by seeing or by making it.
func (r *resolver) checkHostFile(field string, out *Resolved, written, canon, read, plant string) {
	for _, q := range slices.Compact([]string{written, canon}) {
		g := out.Covering(q)
		if _, err := os.Lstat(q); err != nil && g.Path != "" && g.Access == AccessReadWrite {
			r.fail(field, fmt.Sprintf("%s does not exist, and the workload could make it (%s grants %s read-write) and %s", q, g.Field, g.Path, plant),
				"keep the file outside every read-write grant", nil)
			return
		}
		if g.Path != "" && g.Access != AccessDeny {
			r.fail(field, fmt.Sprintf("%s is visible inside the sandbox (%s grants %s %s): the workload could %s", q, g.Field, g.Path, g.Access, read),
				"keep the file outside every grant, or add it to filesystem.deny", nil)
			return
		}
		if g := out.Covering(filepath.Dir(q)); g.Path != "" && g.Access == AccessReadWrite {
			r.fail(field, fmt.Sprintf("%s is in a directory the workload can write (%s grants %s read-write): it could put another file, or a link to one, in its place", q, g.Field, g.Path),
				"keep the file outside every read-write grant", nil)
			return
		}
	}
}

// checkExposeFile refuses an exposed file inside a grant, or above one.
func (r *resolver) checkExposeFile(field string, out *Resolved, file string) {
	forms := []string{file}
	if r.homeCanon != r.home && Within(file, r.home) { // grants are canonical
		rel, _ := filepath.Rel(r.home, file)
		forms = append(forms, filepath.Join(r.homeCanon, rel))
	}
	for _, g := range out.Grants {
		for _, q := range forms {
			if Within(q, g.Path) || Within(g.Path, q) {
				r.fail(field, fmt.Sprintf("%s is inside the grant %s (%s): the provider makes the placeholder's file in the sandbox's own tree, outside every grant", file, g.Path, g.Field),
					"choose a path outside every grant, such as /run/secrets/NAME", nil)
				return
			}
		}
	}
}

// canonicalOrNearest is p with symlinks resolved, or, when p does not
// exist, its nearest existing ancestor resolved and the rest joined.
func canonicalOrNearest(p string) string {
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if c, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(c, rest)
		}
		if q == filepath.Dir(q) {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// withDefaults is c with every default written out and its slices its
// own: Shape, OnMismatch, a command's Timeout, each endpoint's Ports
// ([443]), place (DefaultCredentialHeader when none is named) and body
// size.
func (c Credential) withDefaults() Credential {
	if c.Shape == "" {
		c.Shape = DefaultShape
	}
	if c.OnMismatch == "" {
		c.OnMismatch = MismatchDeny
	}
	if len(c.Source.Command) > 0 {
		c.Source.Command = slices.Clone(c.Source.Command)
		if c.Source.Timeout == 0 {
			c.Source.Timeout = DefaultCommandTimeout
		}
	}
	eps := make([]CredentialEndpoint, len(c.Endpoints))
	for j, e := range c.Endpoints {
		e.Ports = slices.Clone(e.Ports)
		if len(e.Ports) == 0 {
			e.Ports = []int{443}
		}
		if e.Body != nil {
			b := *e.Body
			if b.Max == 0 {
				b.Max = DefaultBodyMax
			}
			e.Body = &b
		}
		if e.Header == "" && e.Basic == "" && e.Query == "" && e.Body == nil {
			e.Header = DefaultCredentialHeader
		}
		eps[j] = e
	}
	c.Endpoints = eps
	return c
}

// drawPlaceholder draws a placeholder of shape (valid): its literal text
// around random ASCII letters and digits from crypto/rand.
func drawPlaceholder(shape string) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	prefix, n, suffix, _ := parseShape(shape)
	out := make([]byte, 0, len(prefix)+n+len(suffix))
	out = append(out, prefix...)
	buf := make([]byte, n+n/2)
	for len(out) < len(prefix)+n {
		rand.Read(buf)
		for _, b := range buf {
			if b < 248 && len(out) < len(prefix)+n { // 248 = 4*62: no bias
				out = append(out, alnum[b%62])
			}
		}
	}
	return string(append(out, suffix...))
}

// checkKeptPlaceholder says what is wrong with a placeholder a caller
// keeps (Context.Placeholders), or "": it is as a shape draws it, at
// least MinRandom characters of shapeChar.
func checkKeptPlaceholder(ph string) string {
	if len(ph) < MinRandom {
		return fmt.Sprintf("is %d characters long, fewer than %d", len(ph), MinRandom)
	}
	for i := 0; i < len(ph); i++ {
		if !shapeChar(ph[i]) {
			return "has a character other than a letter, digit, '.', '_' or '-'"
		}
	}
	return ""
}
