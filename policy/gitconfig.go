package policy

import (
	"strings"
)

// GitVar is one variable of a git configuration file.
type GitVar struct {
	Key   string // "section.key" or "section.subsection.key"; section and key lower-cased, the subsection as written
	Value string // unquoted, escapes resolved; "true" for a key written without "="
	Line  int    // 1-based
}

// ParseGitConfig reads the variables of a git configuration file (the
// syntax of git-config(1) "CONFIGURATION FILE": [section], [section
// "subsection"], the legacy [section.subsection], key = value, # and ;
// comments, double quotes, backslash escapes and line continuations). It is
// lenient: a line it cannot read is skipped, as Corral only looks for the
// keys that make git run commands and over-reading is the safe side.
func ParseGitConfig(data []byte) []GitVar {
	var out []GitVar
	section := ""
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(lines[i], "\r"))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.LastIndexByte(line, ']')
			if end < 0 {
				continue
			}
			hdr := strings.TrimSpace(line[1:end])
			if name, sub, ok := strings.Cut(hdr, " "); ok {
				sub = strings.TrimSpace(sub)
				sub = strings.TrimSuffix(strings.TrimPrefix(sub, `"`), `"`)
				sub = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(sub)
				section = strings.ToLower(name) + "." + sub
			} else if name, sub, ok := strings.Cut(hdr, "."); ok {
				section = strings.ToLower(name) + "." + strings.ToLower(sub)
			} else {
				section = strings.ToLower(hdr)
			}
			rest := strings.TrimSpace(line[end+1:])
			if rest == "" || rest[0] == '#' || rest[0] == ';' {
				continue
			}
			line = rest // "[core] editor = x" on one line
		}
		key, raw, hasValue := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if key == "" || section == "" {
			continue
		}
		value := "true"
		if hasValue {
			// A trailing backslash continues the value on the next line.
			for strings.HasSuffix(raw, `\`) && i+1 < len(lines) {
				i++
				raw = raw[:len(raw)-1] + lines[i]
			}
			value = gitValue(raw)
		}
		out = append(out, GitVar{Key: section + "." + key, Value: value, Line: lineNo})
	}
	return out
}

// gitValue unquotes a raw value: surrounding whitespace trimmed, quotes
// removed, \" \\ \n \t resolved, a # or ; outside quotes starting a comment.
func gitValue(raw string) string {
	var b strings.Builder
	quoted := false
	raw = strings.TrimSpace(raw)
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && i+1 < len(raw):
			i++
			switch raw[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(raw[i])
			}
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimSpace(b.String())
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String())
}

// GitCommandKey reports whether a git configuration key (as ParseGitConfig
// returns it) makes git run a command or read configuration from elsewhere
// (git-config(1), githooks(5), gitattributes(5), gitcredentials(7)):
// core.fsmonitor, core.hooksPath, core.sshCommand, core.pager,
// core.editor, core.askPass, core.gitProxy, sequence.editor, diff.external,
// credential helpers, filter.*.clean|smudge|process, diff.*.textconv and
// .command, merge.*.driver, difftool/mergetool commands, include.path and
// includeIf.*.path, pager.*, uploadpack.packObjectsHook, gpg.program and
// gpg.*.program, protocol.*.allow, remote.*.uploadpack|receivepack|vcs,
// submodule.*.update, web.browser. Aliases are left out: one runs only
// when a person types it.
func GitCommandKey(key string) bool {
	switch key {
	case "core.fsmonitor", "core.hookspath", "core.sshcommand", "core.pager", "core.editor", "core.askpass",
		"core.gitproxy", "sequence.editor", "diff.external", "credential.helper", "include.path",
		"uploadpack.packobjectshook", "gpg.program", "web.browser", "instaweb.httpd", "merge.tool", "diff.tool":
		return true
	}
	parts := strings.Split(key, ".")
	first, last := parts[0], parts[len(parts)-1]
	if len(parts) < 3 {
		return first == "pager"
	}
	switch {
	case first == "filter" && (last == "clean" || last == "smudge" || last == "process"),
		first == "diff" && (last == "textconv" || last == "command"),
		first == "merge" && last == "driver",
		first == "includeif" && last == "path",
		first == "credential" && last == "helper",
		first == "gpg" && last == "program",
		(first == "difftool" || first == "mergetool") && (last == "cmd" || last == "path"),
		first == "protocol" && last == "allow",
		first == "remote" && (last == "uploadpack" || last == "receivepack" || last == "vcs"),
		first == "submodule" && last == "update":
		return true
	}
	return false
}
