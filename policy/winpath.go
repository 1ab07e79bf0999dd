package policy

import (
	"fmt"
	"runtime"
	"strings"
)

// OS is the platform a policy's paths are written for: it decides their
// syntax (checkPathSyntax), the default policy (DefaultFor) and how Resolve
// canonicalises and checks them.
type OS string

const (
	OSLinux   OS = "linux"   // POSIX paths: /usr, ~/src, {workdir}/build
	OSWindows OS = "windows" // drive paths: C:\Windows, ~\src, {workdir}\build
)

// HostOS is the OS of this build's host: windows on Windows, linux
// elsewhere (Corral's other providers are Linux ones).
func HostOS() OS {
	if runtime.GOOS == "windows" {
		return OSWindows
	}
	return OSLinux
}

// ParseOS reads an --os flag's value: "linux" or "windows"; "" is HostOS.
func ParseOS(s string) (OS, error) {
	switch OS(s) {
	case "":
		return HostOS(), nil
	case OSLinux, OSWindows:
		return OS(s), nil
	}
	return "", fmt.Errorf("unknown OS %q: write linux or windows", s)
}

// winReserved are the DOS device names Win32 maps to devices in every
// directory, with any extension and trailing spaces ("NUL.txt", "con "):
// Microsoft's "Naming Files, Paths, and Namespaces", which also lists the
// superscript-digit forms.
var winReserved = func() map[string]bool {
	m := map[string]bool{"CON": true, "PRN": true, "AUX": true, "NUL": true, "CONIN$": true, "CONOUT$": true}
	for _, d := range []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "¹", "²", "³"} {
		m["COM"+d], m["LPT"+d] = true, true
	}
	return m
}()

// winCheckName says what is wrong with one component of a Windows path,
// or "" (Naming Files, Paths, and Namespaces): the characters Win32
// refuses, a colon (it names an alternate data stream), a trailing dot or
// space (Win32 strips them, so "secret." opens "secret"), and the reserved
// device names.
func winCheckName(path, c string) (msg, hint string) {
	for _, r := range c {
		switch {
		case r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f:
			// C0 and C1 controls (a terminal reads U+009B as CSI) and the
			// bidirectional controls, which make a path print as another.
			return fmt.Sprintf("path %q contains a control character", path), "remove it"
		case strings.ContainsRune(`<>"|?*`, r):
			return fmt.Sprintf("path %q contains %q, which Windows does not allow in a name", path, r), "remove it (a policy path names one file; it is not a wildcard)"
		case r == ':':
			return fmt.Sprintf("path %q names an alternate data stream (%q)", path, c),
				"grant the file itself, without \":stream\"; a stream is part of its file and shares its access"
		}
	}
	if strings.HasSuffix(c, ".") || strings.HasSuffix(c, " ") {
		return fmt.Sprintf("path %q has a name ending in a dot or a space (%q), which Windows strips, so it names another file", path, c),
			fmt.Sprintf("write %q", strings.TrimRight(c, ". "))
	}
	base, _, _ := strings.Cut(c, ".")
	if winReserved[strings.ToUpper(strings.TrimRight(base, " "))] {
		return fmt.Sprintf("path %q contains the reserved device name %q", path, c),
			"Windows opens a device for CON, PRN, AUX, NUL, COM1-9 and LPT1-9 in any directory; rename the file"
	}
	return "", ""
}

// checkWinPathSyntax is checkPathSyntax for OSWindows: "C:\dir" (or
// "C:/dir"), "~" or "~\dir" (the user's profile), "{workdir}" or
// "{workdir}\dir"; with allowRelative, a relative "dir\name". Refused with
// a hint: UNC and device namespaces (\\server\share, \\?\UNC\..., \\.\...,
// \\?\GLOBALROOT, \\?\C:\..., \??\...), drive-relative (C:foo) and rooted
// (\foo, /usr) paths, "..", and every component winCheckName refuses.
func checkWinPathSyntax(s string, allowRelative bool) (msg, hint string) {
	const how = `start it with a drive (C:\), ~\ or {workdir}\`
	switch {
	case s == "":
		return "empty path", `write a path such as C:\Windows or {workdir}\build`
	case strings.ContainsRune(s, 0):
		return "path contains a NUL byte", "remove the NUL byte"
	}
	w := strings.ReplaceAll(s, "/", `\`)
	rest := w
	switch {
	case strings.HasPrefix(w, `\\?\`) || strings.HasPrefix(w, `\\.\`) || strings.HasPrefix(w, `\??\`):
		ns := strings.ToUpper(w[4:])
		switch {
		case strings.HasPrefix(ns, `UNC\`):
			return fmt.Sprintf("path %q is a network share (UNC)", s), "grant local folders only: copy what the workload needs to a local folder"
		case len(ns) >= 3 && isDriveLetter(ns[0]) && ns[1] == ':' && ns[2] == '\\' && strings.HasPrefix(w, `\\?\`):
			return fmt.Sprintf("path %q is a verbatim (\\\\?\\) path, which Windows does not normalise", s), fmt.Sprintf("write it as %q", w[4:])
		}
		return fmt.Sprintf("path %q is in the Win32 device namespace (a disk, pipe or device object, not a folder)", s),
			`grant folders by their drive path (C:\...); devices and pipes cannot be granted`
	case strings.HasPrefix(w, `\\`):
		return fmt.Sprintf("path %q is a network share (UNC)", s), "grant local folders only: copy what the workload needs to a local folder"
	case s == "~" || strings.HasPrefix(w, `~\`):
		rest = w[1:]
	case s == "{workdir}" || strings.HasPrefix(w, `{workdir}\`):
		rest = w[len("{workdir}"):]
	case strings.HasPrefix(s, "~"):
		return fmt.Sprintf("%q: ~user is not supported", s), `write the absolute path, or ~\... for your own profile`
	case strings.HasPrefix(s, "{"):
		return fmt.Sprintf("unknown placeholder in %q", s), "the only placeholder is {workdir}, at the start of the path"
	case len(w) >= 2 && isDriveLetter(w[0]) && w[1] == ':':
		if len(w) == 2 || w[2] != '\\' {
			return fmt.Sprintf("path %q is drive-relative (relative to that drive's current directory)", s), fmt.Sprintf("write %q", w[:2]+`\`+w[2:])
		}
		rest = w[2:]
	case strings.HasPrefix(w, `\`):
		return fmt.Sprintf("path %q has no drive (it is relative to the current drive)", s), fmt.Sprintf(`write the drive, e.g. "C:%s"; a Linux path has no Windows meaning`, w)
	default:
		if !allowRelative {
			return fmt.Sprintf("relative path %q", s), how + `, e.g. {workdir}\` + strings.TrimPrefix(w, `.\`)
		}
	}
	if strings.Contains(rest, "{workdir}") {
		return fmt.Sprintf("placeholder in the middle of %q", s), "{workdir} is only expanded at the start of a path"
	}
	named := false
	for _, c := range strings.Split(rest, `\`) {
		switch c {
		case "", ".":
			continue
		case "..":
			return fmt.Sprintf("path %q contains a \"..\" component", s), "write the path without \"..\"; grants must name their target directly"
		}
		if msg, hint := winCheckName(s, c); msg != "" {
			return msg, hint
		}
		named = true
	}
	if allowRelative && !named && rest == w {
		return fmt.Sprintf("protected path %q names the writable root itself", s), `name a path inside it, e.g. .git\hooks, or drop read_write on that root`
	}
	return "", ""
}

func isDriveLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// WinClean is the lexical form of a checked Windows path: "/" becomes
// "\", empty and "." components go, the drive letter is upper case, and
// there is no trailing separator except on a drive root ("C:\"). Case is
// kept (names compare case-insensitively: WinWithin). Relative paths stay
// relative. It does not look at any file system.
func WinClean(p string) string {
	w := strings.ReplaceAll(p, "/", `\`)
	prefix := ""
	if len(w) >= 2 && isDriveLetter(w[0]) && w[1] == ':' {
		prefix, w = strings.ToUpper(w[:1])+`:\`, w[2:]
	}
	var parts []string
	for _, c := range strings.Split(w, `\`) {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	return prefix + strings.Join(parts, `\`)
}

// WinJoin joins a clean Windows path and a relative one, cleaned.
func WinJoin(dir, rel string) string {
	if rel = WinClean(rel); rel == "" {
		return WinClean(dir)
	}
	if strings.HasSuffix(dir, `\`) {
		return WinClean(dir + rel)
	}
	return WinClean(dir + `\` + rel)
}

// WinDir is the parent of a clean Windows path; a drive root is its own.
func WinDir(p string) string {
	i := strings.LastIndex(p, `\`)
	switch {
	case i < 0:
		return p
	case i == 2 && p[1] == ':':
		return p[:3]
	}
	return p[:i]
}

// WinWithin is Within for clean Windows paths, by Windows' rules: names
// compare case-insensitively (NTFS's default; by strings.ToLower, which
// folds a little more than NTFS's upcase table: a few more pairs compare
// equal), whole components only, and a path on another drive is never
// within.
func WinWithin(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	p, d := strings.ToLower(path), strings.ToLower(dir)
	if p == d {
		return true
	}
	if !strings.HasSuffix(d, `\`) {
		d += `\`
	}
	return strings.HasPrefix(p, d)
}

// winShortName reports whether c has the shape of an 8.3 alias that
// Windows generates for a long name ("PROGRA~1", "LONGFI~2.TXT"): up to six
// characters, "~", digits, an optional extension of up to three. Such an
// alias names whatever long name the volume gave it, which only the host
// can tell.
func winShortName(c string) bool {
	base, ext, _ := strings.Cut(c, ".")
	i := strings.LastIndexByte(base, '~')
	if i < 1 || i > 6 || i == len(base)-1 || len(ext) > 3 || len(base) > 8 {
		return false
	}
	for _, r := range base[i+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// WindowsPathProblem says what is wrong with s as a concrete Windows path
// (a provider's check of what it maps, whatever the policy's OS): it must
// be a drive path, and pass every rule of a Windows policy path
// (checkWinPathSyntax). "" when s is fine; Linux-rooted paths ("/usr") are
// refused too, with a hint to write a drive path.
func WindowsPathProblem(s string) (msg, hint string) {
	if msg, hint := checkWinPathSyntax(s, false); msg != "" {
		return msg, hint
	}
	if w := strings.ReplaceAll(s, "/", `\`); len(w) < 3 || !isDriveLetter(w[0]) || w[1] != ':' {
		return fmt.Sprintf("%q is not a drive path", s), `write a drive path such as C:\...`
	}
	return "", ""
}
