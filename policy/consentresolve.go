package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// consent makes the consent section concrete for out (its grants and
// credentials known): folders.ask globs expanded, their literal leading
// components canonical (the longest existing literal prefix resolved,
// canonicalOrNearest) and refused when they could match what no request
// may have (ceilingForbids, on the glob as written and as canonical),
// folders.never and filesystem.deny paths expanded and canonical (a
// missing one's nearest existing ancestor resolved), hosts parsed, defaults
// filled, persist expanded and refused where the workload could read or
// write it (inside the workdir, visible through a grant, in a directory it
// can write: it would read the decisions, or plant standing grants). With
// consent.folders, a grant or a credential's exposed file at or under
// GrantsDir is refused: the grant slots are mounted there.
func (r *resolver) consent(out *Resolved) *ResolvedConsent {
	c := r.p.Consent
	if c == nil {
		return nil
	}
	rc := &ResolvedConsent{
		Timeout:    time.Duration(c.Timeout),
		MaxPending: c.MaxPending,
		Burst:      DefaultConsentBurst,
		Per:        DefaultConsentPer,
	}
	if rc.Timeout == 0 {
		rc.Timeout = DefaultConsentTimeout
	}
	if rc.MaxPending == 0 {
		rc.MaxPending = DefaultConsentMaxPending
	}
	if c.Rate != nil {
		if c.Rate.Burst != 0 {
			rc.Burst = c.Rate.Burst
		}
		if c.Rate.Per != 0 {
			rc.Per = time.Duration(c.Rate.Per)
		}
	}
	rc.Persist = r.consentPersist(out)
	rc.State = r.consentStateDirs()
	if rc.Persist != "" {
		rc.State = append(rc.State, rc.Persist)
	}
	homes := slices.Compact([]string{r.home, r.homeCanon})
	if r.home == "" {
		homes = nil
	}
	if f := c.Folders; f != nil {
		rc.FolderAccess = f.Access
		if rc.FolderAccess == "" {
			rc.FolderAccess = AccessReadOnly
		}
		for i, g := range f.Ask {
			field := fmt.Sprintf("consent.folders.ask[%d]", i)
			written, ok := r.expand(field, g)
			if !ok {
				continue
			}
			canon := canonicalGlob(written)
			for _, form := range slices.Compact([]string{written, canon}) {
				if msg, hint := ceilingForbids(form, homes, rc.State); msg != "" {
					if form != written {
						msg = fmt.Sprintf("%s resolves to %s: %s", written, canon, msg)
					}
					r.fail(field, msg, hint, nil)
					break
				}
			}
			rc.Folders = append(rc.Folders, ConsentGlob{Glob: canon, Field: field})
		}
		for i, n := range f.Never {
			field := fmt.Sprintf("consent.folders.never[%d]", i)
			if written, ok := r.expand(field, n); ok {
				rc.FolderNever = append(rc.FolderNever, ConsentPath{Path: canonicalOrNearest(written), Field: field})
			}
		}
		for i, d := range r.p.Filesystem.Deny {
			field := fmt.Sprintf("filesystem.deny[%d]", i)
			if written, ok := r.expand(field, d.Path); ok {
				rc.Deny = append(rc.Deny, ConsentPath{Path: canonicalOrNearest(written), Field: field})
			}
		}
		// A grant written under GrantsDir (optional and missing too: it
		// may exist at the next start), or leading there.
		under := map[string]string{}
		for _, w := range r.written {
			if Within(w.path, GrantsDir) {
				under[w.field] = w.path
			}
		}
		for _, g := range out.Grants {
			if _, dup := under[g.Field]; !dup && Within(g.Path, GrantsDir) {
				under[g.Field] = g.Path
			}
		}
		for _, f := range sortedKeys(under) {
			r.fail(f, fmt.Sprintf("%s is at or under %s, where consent.folders mounts the grants it makes", under[f], GrantsDir), "grant a path outside "+GrantsDir+", or remove consent.folders", nil)
		}
		for _, cred := range out.Credentials {
			if cred.File != "" && Within(cred.File, GrantsDir) {
				r.fail(cred.Field+".expose.file", fmt.Sprintf("%s is under %s, where consent.folders mounts the grants it makes", cred.File, GrantsDir), "choose a path outside it, such as /run/secrets/NAME", nil)
			}
		}
	}
	if h := c.Hosts; h != nil {
		for _, l := range []struct {
			name    string
			entries []string
			into    *[]ConsentHost
		}{{"ask", h.Ask, &rc.Hosts}, {"never", h.Never, &rc.HostNever}} {
			for i, s := range l.entries {
				host, port, msg, _ := parseConsentHost(s, l.name == "ask")
				if msg == "" { // Validate has refused the others
					*l.into = append(*l.into, ConsentHost{Host: host, Port: port, Field: fmt.Sprintf("consent.hosts.%s[%d]", l.name, i)})
				}
			}
		}
	}
	return rc
}

// consentPersist is the standing grants file, canonical (or "" when the
// home is unknown and none is written), refused inside the workdir or
// where the sandbox could read it or make it (checkHostFile).
func (r *resolver) consentPersist(out *Resolved) string {
	const field = "consent.persist"
	s := r.p.Consent.Persist
	if s == "" {
		if r.home == "" {
			return ""
		}
		s = DefaultConsentPersist
	}
	written, ok := r.expand(field, s)
	if !ok {
		return ""
	}
	canon := canonicalOrNearest(written)
	for _, q := range slices.Compact([]string{written, canon}) {
		if Within(q, r.workdir) {
			r.fail(field, fmt.Sprintf("%s is inside the workdir %s, which the workload can write: it could plant standing grants", q, r.workdir),
				"keep the standing grants outside every grant, e.g. "+DefaultConsentPersist+" (the default)", nil)
			return canon
		}
	}
	r.checkHostFile(field, out, written, canon, "read every standing decision", "plant standing grants")
	return canon
}

// consentStateDirs are the canonical directories of Corral's own state
// that no folder request may reach: /var/lib/corral, and with a home its
// ~/.config/corral and ~/.local/state/corral (or under XDG_CONFIG_HOME and
// XDG_STATE_HOME, when the caller's environment sets them absolute: the
// service records' base, service/record.go).
func (r *resolver) consentStateDirs() []string {
	dirs := []string{"/var/lib/corral"}
	if r.home != "" {
		dirs = append(dirs, filepath.Join(r.home, ".config", "corral"), filepath.Join(r.home, ".local", "state", "corral"))
	}
	for _, name := range []string{"XDG_CONFIG_HOME", "XDG_STATE_HOME"} {
		if v := lookupEnv(r.ctx.Environ, name); filepath.IsAbs(v) {
			dirs = append(dirs, filepath.Join(v, "corral"))
		}
	}
	for i, d := range dirs {
		dirs[i] = canonicalOrNearest(filepath.Clean(d))
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}

// lookupEnv is the value of the first name= in environ ("" when absent),
// as getenv.
func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// canonicalGlob is the clean absolute glob g with its literal leading
// components (those before the first holding a '*') canonical: the
// longest existing literal prefix resolved (canonicalOrNearest), the
// rest kept.
func canonicalGlob(g string) string {
	segs := globSegs(g)
	k := slices.IndexFunc(segs, func(s string) bool { return strings.Contains(s, "*") })
	if k < 0 {
		k = len(segs)
	}
	prefix := canonicalOrNearest("/" + strings.Join(segs[:k], "/"))
	return filepath.Join(append([]string{prefix}, segs[k:]...)...)
}
