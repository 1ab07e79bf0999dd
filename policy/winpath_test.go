package policy

import (
	"errors"
	"strings"
	"testing"
)

// winPolicy parses a Windows policy whose read_only list is paths.
func winPolicy(t *testing.T, field string, paths ...string) (*Policy, error) {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\nfilesystem:\n  " + field + ":\n")
	for _, p := range paths {
		b.WriteString("    - '" + strings.ReplaceAll(p, "'", "''") + "'\n")
	}
	return ParseFor([]byte(b.String()), "win.yaml", OSWindows)
}

// TestWindowsPathFormsRefused is P35's syntax half: every dangerous form is
// refused with a positioned error naming what it is, in each list.
func TestWindowsPathFormsRefused(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{`\\server\share\x`, "network share"},
		{`//server/share`, "network share"},
		{`\\?\UNC\server\share`, "network share"},
		{`\\.\PhysicalDrive0`, "device namespace"},
		{`\\.\pipe\docker_engine`, "device namespace"},
		{`\\?\GLOBALROOT\Device\HarddiskVolume1`, "device namespace"},
		{`\??\C:\Windows`, "device namespace"},
		{`\\?\C:\Users\me\work`, "verbatim"},
		{`C:foo`, "drive-relative"},
		{`C:`, "drive-relative"},
		{`\Users\me`, "no drive"},
		{`/usr`, "no drive"},
		{`C:\work\file.txt:stream`, "alternate data stream"},
		{`C:\work\file.txt::$DATA`, "alternate data stream"},
		{`C:\secret.`, "dot or a space"},
		{`C:\secret `, "dot or a space"},
		{`C:\work\NUL`, "reserved device name"},
		{`C:\work\con.txt`, "reserved device name"},
		{`C:\work\COM1`, "reserved device name"},
		{`C:\work\lpt¹`, "reserved device name"},
		{`C:\work\..\secret`, `".."`},
		{`C:\work\a*b`, "does not allow"},
		{"C:\\work\\evil\u202etxt.exe", "control character"},
		{`relative\dir`, "relative path"},
		{`~user\x`, "~user"},
		{`C:\{workdir}\x`, "placeholder in the middle"},
	} {
		for _, field := range []string{"read_only", "read_write", "deny"} {
			_, err := winPolicy(t, field, `C:\ok`, c.path)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Errorf("%s %q: got %v, want a policy error", field, c.path, err)
				continue
			}
			if !strings.Contains(pe.Msg, c.want) || pe.Line != 5 || pe.Field != "filesystem."+field+"[1]" || pe.Hint == "" {
				t.Errorf("%s %q: got %s (line %d, field %s, hint %q), want %q at line 5 with a hint", field, c.path, pe.Msg, pe.Line, pe.Field, pe.Hint, c.want)
			}
		}
	}
}

// TestWindowsPathFormsAccepted: the plain forms parse, on any host.
func TestWindowsPathFormsAccepted(t *testing.T) {
	for _, p := range []string{`C:\Windows`, `c:/program files/git`, `D:\`, `~`, `~\src`, `~/src`, `{workdir}`, `{workdir}\build`, `C:\work\CONFIG.SYS`, `C:\work\nul-not-a-device`, `C:\a.b\.git`} {
		if _, err := winPolicy(t, "read_only", p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
}

// TestWinCleanAndWithin: the lexical helpers compare the Windows way.
func TestWinCleanAndWithin(t *testing.T) {
	for in, want := range map[string]string{`c:/Users//Me/./work\`: `C:\Users\Me\work`, `C:\`: `C:\`, `c:`: `C:\`, `a\\b\`: `a\b`} {
		if got := WinClean(in); got != want {
			t.Errorf("WinClean(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		p, d string
		want bool
	}{
		{`C:\Users\Me\Work`, `c:\users\me`, true},
		{`C:\Users\Me`, `C:\USERS\ME`, true},
		{`C:\Users\Meet`, `C:\Users\Me`, false},
		{`D:\Users\Me`, `C:\Users\Me`, false},
		{`C:\x`, `C:\`, true},
	} {
		if got := WinWithin(c.p, c.d); got != c.want {
			t.Errorf("WinWithin(%q, %q) = %v", c.p, c.d, got)
		}
	}
	if WinDir(`C:\a`) != `C:\` || WinDir(`C:\`) != `C:\` || WinDir(`C:\a\b`) != `C:\a` {
		t.Error("WinDir")
	}
	for c, want := range map[string]bool{"PROGRA~1": true, "LONGFI~2.TXT": true, "a~1": true, "~1": false, "foo~": false, "foo~bar": false, "TOOLONGNAME~1": false, "x~1.abcd": false} {
		if winShortName(c) != want {
			t.Errorf("winShortName(%q) = %v", c, !want)
		}
	}
}

// resolveWinLexical resolves src (a Windows policy) as a non-Windows host
// does, for the workdir C:\Users\me\work and the profile C:\Users\me.
func resolveWinLexical(t *testing.T, src string) (*Resolved, error) {
	t.Helper()
	if HostOS() == OSWindows {
		t.Skip("lexical resolution is for non-Windows hosts; the Windows host resolves against its file system (winresolve_windows_test.go)")
	}
	p, err := ParseFor([]byte(src), "win.yaml", OSWindows)
	if err != nil {
		return nil, err
	}
	return p.Resolve(Context{Home: `C:\Users\me`, Workdir: `C:\Users\me\work`})
}

// TestWindowsLexicalDecisions is P35's decision half off the host: mixed
// case and separators decide like the plain long path, precedence folds
// case, and the dangerous grants are refused.
func TestWindowsLexicalDecisions(t *testing.T) {
	r, err := resolveWinLexical(t, "version: 1\nfilesystem:\n  read_only: ['c:/users/ME/work/Docs', 'C:\\Windows']\n  read_write: ['~\\src']\n  deny: ['C:\\USERS\\me\\WORK\\docs', '{workdir}\\secret']\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Lexical == "" {
		t.Error("Lexical note missing")
	}
	got := map[string]Access{}
	for _, g := range r.Grants {
		got[strings.ToLower(g.Path)] = g.Access
	}
	want := map[string]Access{
		`c:\users\me\work\docs`:   AccessDeny, // deny beats ro, whatever the case
		`c:\windows`:              AccessReadOnly,
		`c:\users\me\src`:         AccessReadWrite,
		`c:\users\me\work`:        AccessReadWrite,
		`c:\users\me\work\secret`: AccessDeny,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (grants %+v)", k, got[k], v, r.Grants)
		}
	}
	if len(got) != len(want) {
		t.Errorf("grants %+v, want %v", r.Grants, want)
	}
	if len(r.Skipped) == 0 || !strings.Contains(strings.Join(r.Skipped, " "), `C:\Users\me\work\.git`) {
		t.Errorf("protected entries under the workdir not listed as unchecked: %v", r.Skipped)
	}
	for _, kv := range r.Env {
		if strings.HasPrefix(kv, "PATH=") && kv != "PATH="+DefaultPATHWindows {
			t.Errorf("env %s: a lexical resolution must not pass this host's PATH", kv)
		}
	}
}

func TestWindowsLexicalRefusals(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"read_write: ['C:\\']", "drive root"},
		{"read_write: ['c:/']", "drive root"},
		{"read_write: ['C:\\Users']", "every user's profile"},
		{"read_write: ['c:\\users\\ME']", "your profile"},
		{"read_write: ['~']", "your profile"},
		{"read_write: ['C:\\Windows\\Temp']", `under C:\Windows`},
		{"read_write: ['c:\\program files\\Git']", `under C:\Program Files`},
		{"read_write: ['C:\\Program Files (x86)']", `under C:\Program Files (x86)`},
		{"read_write: ['C:\\ProgramData\\corral']", `under C:\ProgramData`},
		{"read_only: ['C:\\Users\\alice\\Documents']", "another user's profile"},
		{"read_only: ['C:\\ProgramData\\DockerDesktop']", "Docker"},
		{"read_only: ['~\\AppData\\Local\\Docker\\wsl']", "Docker"},
		{"read_only: ['C:\\PROGRA~1\\Git']", "8.3 short name"},
		{"read_only: ['{workdir}\\LONGFI~1.TXT']", "8.3 short name"},
		{"read_write: ['~\\AppData\\Roaming\\Microsoft\\Windows\\Start Menu\\Programs\\Startup']", "run programs later"},
		{"read_write: ['~\\AppData']", "run programs later"},
		{"read_write: ['~\\AppData\\Local\\Temp']", "run programs later"},
		{"read_write: ['~\\Documents\\PowerShell']", "run programs later"},
		{"read_write: ['C:\\Users\\Public']", "every user's programs read"},
		{"read_write: ['C:\\Program Files (Arm)\\x']", `under C:\Program Files (Arm)`},
	} {
		_, err := resolveWinLexical(t, "version: 1\nfilesystem:\n  "+c.src+"\n")
		var pe *Error
		if !errors.As(err, &pe) {
			var pes Errors
			if errors.As(err, &pes) && len(pes) > 0 {
				pe = pes[0]
			} else {
				t.Errorf("%s: got %v, want a refusal", c.src, err)
				continue
			}
		}
		if !strings.Contains(pe.Msg, c.want) || pe.Line != 3 || pe.Hint == "" {
			t.Errorf("%s: got %q (line %d, hint %q), want %q at line 3", c.src, pe.Msg, pe.Line, pe.Hint, c.want)
		}
	}
	// Allowed: the public profile, denying another user's, reading Windows.
	if _, err := resolveWinLexical(t, "version: 1\nfilesystem:\n  read_only: ['C:\\Users\\Public\\Documents', 'C:\\Program Files']\n  deny: ['C:\\Users\\alice']\n"); err != nil {
		t.Error(err)
	}
	if _, err := resolveWinLexical(t, "version: 1\nfilesystem:\n  read_only: ['C:\\x']\n"); err != nil {
		t.Error(err)
	}
}

// TestWindowsWorkdirMustBeADrivePath: off the host, the workdir is given.
func TestWindowsWorkdirMustBeADrivePath(t *testing.T) {
	if HostOS() == OSWindows {
		t.Skip("for non-Windows hosts")
	}
	p := DefaultFor(OSWindows)
	_, err := p.Resolve(Context{Workdir: "/work/main"})
	if err == nil || !strings.Contains(err.Error(), "not a Windows drive path") {
		t.Fatalf("got %v", err)
	}
}

// The printable Windows default is the built-in one, and it resolves
// without errors.
func TestDefaultYAMLWindowsIsDefault(t *testing.T) {
	p, err := ParseFor(DefaultYAMLWindows, "default_windows.yaml", OSWindows)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Hash(p), Hash(DefaultFor(OSWindows)); got != want {
		t.Errorf("default_windows.yaml hashes to %s, DefaultFor(windows) to %s", got, want)
	}
	if DefaultFor(OSWindows).OS() != OSWindows || Default().OS() != OSLinux {
		t.Error("OS of the defaults")
	}
	// A Windows policy file that writes nothing takes the Windows defaults.
	q, err := ParseFor([]byte("version: 1\n"), "w.yaml", OSWindows)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Filesystem.ReadOnly) == 0 || q.Filesystem.ReadOnly[0].Path != `C:\Windows` || q.Process.Limits.Memory != 0 {
		t.Errorf("defaults of a Windows file: ro %v, limits %+v", q.Filesystem.ReadOnly, q.Process.Limits)
	}
	if Hash(q) != Hash(DefaultFor(OSWindows)) {
		t.Errorf("a Windows file that writes nothing hashes unlike the Windows default: %s vs %s", Hash(q), Hash(DefaultFor(OSWindows)))
	}
	if q.Layers.Requirement(LayerLandlock) != Optional || q.Network.UnixSocketsMode() != UnixSocketsAllow {
		t.Errorf("defaults of a Windows file: layers %v, unix_sockets %q", q.Layers, q.Network.UnixSocketsMode())
	}
	if r, err := ParseFor([]byte("version: 1\nlayers: {seccomp: required}\n"), "w.yaml", OSWindows); err != nil || r.Layers.Requirement(LayerSeccomp) != Required || r.Layers.Requirement(LayerCgroups) != Optional {
		t.Errorf("a written layer keeps its requirement, the others the Windows default's: %v %v", r.Layers, err)
	}
}

// TestWindowsEnvIgnoresCase: Windows' environment names compare without
// case: "PATH" passes "Path", and HOME never passes in any case.
func TestWindowsEnvIgnoresCase(t *testing.T) {
	env := resolveEnv(OSWindows, Env{}, []string{"Path=C:\\bin", "SYSTEMROOT=C:\\Windows", "UserProfile=C:\\Users\\me", "home=x", "ComSpec=cmd"}, nil)
	got := strings.Join(env, "\n")
	for _, want := range []string{"Path=C:\\bin", "SYSTEMROOT=C:\\Windows", "ComSpec=cmd"} {
		if !strings.Contains(got, want) {
			t.Errorf("env lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "UserProfile") || strings.Contains(got, "home=") || strings.Count(got, "ath=") != 1 {
		t.Errorf("env passes the profile, HOME, or two PATHs:\n%s", got)
	}
	set := resolveEnv(OSWindows, Env{Pass: []string{"PATH"}, Set: map[string]string{"PATH": `C:\mine`}}, []string{"Path=C:\\bin"}, nil)
	if strings.Join(set, ",") != `PATH=C:\mine` {
		t.Errorf("set PATH must replace the passed Path: %v", set)
	}
	if lin := resolveEnv(OSLinux, Env{}, []string{"Path=/x"}, nil); strings.Contains(strings.Join(lin, ","), "Path=") {
		t.Errorf("on Linux names keep their case: %v", lin)
	}
}

// A Windows policy has no consent yet (mxc cannot grant live).
func TestWindowsConsentRefused(t *testing.T) {
	_, err := ParseFor([]byte("version: 1\nconsent:\n  folders: {ask: ['~\\src\\**']}\n"), "w.yaml", OSWindows)
	if err == nil || !strings.Contains(err.Error(), "not available for Windows") {
		t.Fatalf("got %v", err)
	}
}

// Off the host too, a read-write grant inside a protected path is refused
// (names without case), as the Windows host refuses it.
func TestWindowsLexicalProtected(t *testing.T) {
	for _, rw := range []string{`{workdir}\.GIT\hooks`, `{workdir}\.vscode`, `~\.config\corral`, `C:\Users\me\work\sub\.Git`} {
		_, err := resolveWinLexical(t, "version: 1\nfilesystem:\n  read_write: ['"+rw+"']\n")
		if err == nil || !strings.Contains(err.Error(), "inside the protected path") {
			t.Errorf("rw %s: %v, want refused inside a protected path", rw, err)
		}
	}
	// An absolute protected entry is one path, compared without case.
	r, err := resolveWinLexical(t, "version: 1\nfilesystem:\n  read_write: ['C:\\data\\Secret\\x']\n  protected: ['c:\\DATA\\secret']\n")
	if err == nil || !strings.Contains(err.Error(), "inside the protected path") {
		t.Errorf("rw inside an absolute protected entry: %v %+v", err, r)
	}
	r, err = resolveWinLexical(t, "version: 1\nfilesystem:\n  protected: ['C:\\data\\secret', '.git']\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`C:\data\secret`, `C:\Users\me\work\.git`}; strings.Join(r.Skipped, ",") != strings.Join(want, ",") {
		t.Errorf("unchecked protected paths %v, want %v", r.Skipped, want)
	}
}

// On Windows a name set twice in two cases is one variable: refused, with
// the position, rather than resolved by chance.
func TestWindowsEnvSetCaseCollision(t *testing.T) {
	_, err := ParseFor([]byte("version: 1\nprocess:\n  env:\n    set: {Path: 'C:\\a', PATH: 'C:\\evil'}\n"), "w.yaml", OSWindows)
	if err == nil || !strings.Contains(err.Error(), "are one variable on Windows") || !strings.Contains(err.Error(), "w.yaml:4:") {
		t.Errorf("got %v", err)
	}
	if _, err := ParseFor([]byte("version: 1\nprocess:\n  env:\n    set: {Path: 'C:\\a', PATH: 'C:\\evil'}\n"), "l.yaml", OSLinux); err != nil {
		t.Errorf("on Linux both are variables of their own: %v", err)
	}
}

// C1 controls (YAML refuses them raw, a JSON or escaped string does not)
// are refused like C0 ones.
func TestWindowsPathC1Control(t *testing.T) {
	if msg, _ := checkWinPathSyntax("C:\\work\\a\u009b2Jb", false); !strings.Contains(msg, "control character") {
		t.Errorf("C1 CSI: %q", msg)
	}
}
