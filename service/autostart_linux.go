//go:build linux

package service

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// UnitName is the systemd unit of session name.
func UnitName(name string) string { return "corral-service-" + name + ".service" }

// unitDir is where units go: the system scope for root, the user scope
// (~/.config/systemd/user, systemd.unit(5)) otherwise.
func unitDir() (dir, wantedBy string, err error) {
	if os.Getuid() == 0 {
		return "/etc/systemd/system", "multi-user.target", nil
	}
	cfg, err := os.UserConfigDir()
	if err != nil {
		return "", "", err
	}
	return filepath.Join(cfg, "systemd", "user"), "default.target", nil
}

// UnitText is the unit that runs the launcher at boot (system) or logon
// (user): Type=forking, since the launcher exits once the workload is up
// and the supervisor it leaves is the main process (PIDFile); systemd
// starts it again if the supervisor fails, and gives the launcher the
// recorded ready timeout and the stop the recorded grace, plus a minute.
func UnitText(rec *Record, exe, wantedBy string) string {
	start := rec.Start
	if start == nil {
		start = &StartSpec{}
	}
	q := func(s string) string { // systemd.syntax(7) quoting
		if strings.ContainsAny(s, " \t\"'\\$%") {
			return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$").Replace(s) + `"`
		}
		return s
	}
	env := ""
	if d := os.Getenv(DirEnv); d != "" {
		env = "Environment=" + q(DirEnv+"="+d) + "\n"
	}
	return fmt.Sprintf(`# Written by corral service autostart enable %[1]s; corral service
# autostart disable %[1]s removes it. This file and %[2]s are part of the
# trusted base: keep both writable by root only.
[Unit]
Description=corral service %[1]s (an agent gateway in a Corral session)
After=network-online.target
Wants=network-online.target

[Service]
Type=forking
%[3]sExecStart=%[4]s service start %[1]s
ExecStop=%[4]s service stop %[1]s
PIDFile=%[5]s
TimeoutStartSec=%[7]d
TimeoutStopSec=%[8]d
Restart=on-failure
RestartSec=10
KillMode=mixed

[Install]
WantedBy=%[6]s
`, rec.Name, exe, env, q(exe), q(Paths{rec.Dir}.PIDFile()), wantedBy, int(start.Timeout().Seconds())+60, int(time.Duration(start.StopGrace).Seconds())+60)
}

// EnableAutostart writes the unit (0644, the caller's) and enables it the
// way systemctl enable does (a symlink in WANTEDBY.wants/), then asks a
// running systemd to reload. It returns the unit's path.
func EnableAutostart(name, exe string) (string, error) {
	_, rec, err := Open(name)
	if err != nil {
		return "", err
	}
	if rec.Start == nil {
		return "", fmt.Errorf("service %s has never been started: corral service start %s -- COMMAND first, so the unit knows what to run", name, name)
	}
	dir, wantedBy, err := unitDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, wantedBy+".wants"), 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, UnitName(name))
	if err := os.WriteFile(path+".tmp", []byte(UnitText(rec, exe, wantedBy)), 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(path+".tmp", 0o644); err != nil { // umask
		return "", err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return "", err
	}
	link := filepath.Join(dir, wantedBy+".wants", UnitName(name))
	_ = os.Remove(link)
	if err := os.Symlink(path, link); err != nil {
		return "", err
	}
	systemctl("daemon-reload")
	return path, nil
}

// DisableAutostart removes the unit and its symlink, if any.
func DisableAutostart(rec *Record) error {
	dir, wantedBy, err := unitDir()
	if err != nil {
		return err
	}
	for _, f := range []string{filepath.Join(dir, wantedBy+".wants", UnitName(rec.Name)), filepath.Join(dir, UnitName(rec.Name))} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	systemctl("daemon-reload")
	return nil
}

// systemctl runs systemctl when systemd is the running init
// (sd_booted(3): /run/systemd/system exists); otherwise the symlinks
// are all that enabling needs.
func systemctl(args ...string) {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return
	}
	if os.Getuid() != 0 {
		args = append([]string{"--user"}, args...)
	}
	_ = exec.Command("systemctl", args...).Run()
}

// AutostartWarnings checks the trusted base of an enabled unit: the unit
// file and the corral binary it names must not be writable by the agent
// (owner, group or others), nor may their directories be.
func AutostartWarnings(rec *Record) (unit string, warnings []string) {
	dir, _, err := unitDir()
	if err != nil {
		return "", nil
	}
	unit = filepath.Join(dir, UnitName(rec.Name))
	b, err := os.ReadFile(unit)
	if err != nil {
		return "", nil
	}
	if rec.Mode == ModeUser {
		// The agent is the caller's own uid: it owns the unit by design;
		// what keeps it out is the sandbox (the unit is in no grant of the
		// default policy), which the posture checks report.
		return unit, nil
	}
	paths := []string{unit, dir}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			paths = append(paths, execPath(v), filepath.Dir(execPath(v)))
		}
	}
	for _, p := range paths {
		if w := writableBy(p, rec.UID, rec.GID); w != "" {
			warnings = append(warnings, fmt.Sprintf("%s is writable by the agent (%s): the agent could change what runs at boot", p, w))
		}
	}
	return unit, warnings
}

// writableBy says how uid/gid could write path ("" when it cannot).
func writableBy(path string, uid, gid int) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st := fi.Sys().(*syscall.Stat_t)
	m := fi.Mode().Perm()
	switch {
	case int(st.Uid) == uid && m&0o200 != 0:
		return "it owns it"
	case int(st.Gid) == gid && m&0o020 != 0:
		return "group-writable, its group"
	case m&0o002 != 0:
		return "world-writable"
	}
	return ""
}

// execPath is the program of an ExecStart= value as UnitText writes it:
// the first word, or a double-quoted string with \\ and \" escapes.
func execPath(v string) string {
	if !strings.HasPrefix(v, `"`) {
		return strings.Fields(v + " x")[0]
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && i+1 < len(v):
			i++
			b.WriteByte(v[i])
		case c == '"':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
