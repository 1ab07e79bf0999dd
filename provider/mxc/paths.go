package mxc

import "strings"

// pathKind classifies a policy path for Windows.
type pathKind int

const (
	pathWindows     pathKind = iota // drive-absolute (C:\...) or UNC (\\server\share...)
	pathLinuxRooted                 // "/usr", "\etc": rooted without a drive; never translated
	pathRelative                    // "C:foo", "foo": not absolute
)

// winPath normalises p for MXC: every "/" becomes "\", repeated separators
// collapse (a leading "\\" of a UNC or \\?\ path is kept) and a trailing
// separator is dropped except on a drive root ("C:\"). Linux-rooted paths
// are not translated to any Windows path: there is no honest translation
// (/usr is not C:\usr), so they are classified for an error.
func winPath(p string) (string, pathKind) {
	s := strings.ReplaceAll(p, "/", `\`)
	prefix := ""
	switch {
	case strings.HasPrefix(s, `\\`):
		prefix, s = `\\`, strings.TrimLeft(s, `\`)
		if s == "" {
			return p, pathLinuxRooted
		}
	case len(s) >= 3 && isLetter(s[0]) && s[1] == ':' && s[2] == '\\':
		prefix, s = strings.ToUpper(s[:1])+`:\`, s[3:]
	case strings.HasPrefix(s, `\`):
		return s, pathLinuxRooted
	default:
		return s, pathRelative
	}
	var parts []string
	for _, e := range strings.Split(s, `\`) {
		if e != "" {
			parts = append(parts, e)
		}
	}
	if prefix == `\\` && len(parts) < 2 && !(len(parts) == 1 && (parts[0] == "?" || parts[0] == ".")) {
		return p, pathRelative // "\\server" without a share
	}
	return prefix + strings.Join(parts, `\`), pathWindows
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// winInside reports whether path is dir or beneath it (both normalised;
// Windows paths compare case-insensitively).
func winInside(path, dir string) bool {
	p, d := strings.ToLower(path), strings.ToLower(dir)
	if p == d {
		return true
	}
	if !strings.HasSuffix(d, `\`) {
		d += `\`
	}
	return strings.HasPrefix(p, d)
}
