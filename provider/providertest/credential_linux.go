//go:build linux

package providertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-sandbox/corral/provider"
)

// CredentialProbeArg is argv[1] that makes a test binary the workload's
// side of the credential-file tests inside a sandbox
// (CredentialProbeMain).
const CredentialProbeArg = "__providertest_credential_probe"

// CredentialProbe is what CredentialProbeMain reports.
type CredentialProbe struct {
	Files   map[string]CredentialFileProbe `json:"files"`
	Hidden  map[string]string              `json:"hidden"`  // path -> "absent", "visible" or stat's error
	Environ []string                       `json:"environ"` // /proc/self/environ
}

// CredentialFileProbe is what CredentialProbeMain found of one file.
type CredentialFileProbe struct {
	Data    string            `json:"data"` // what it holds, after the attacks
	Mode    uint32            `json:"mode"` // its permission bits, after
	Attacks map[string]string `json:"attacks"`
}

// CredentialProbeMain is the workload's side: argv is CredentialProbeArg
// FILE... [-- HIDDEN...]. For each FILE it tries to write, truncate,
// chmod, chown, remove, rename over and away, unmount (plain, detached,
// expired; and with unshare(1), when there is one, in a user and mount
// namespace of its own) and bind over the file, then reads it; for each
// HIDDEN it says what stat says; it reports /proc/self/environ, all as
// one "PROBE {json}" line. It never returns.
func CredentialProbeMain(args []string) {
	files, hidden := args, []string(nil)
	if i := slices.Index(args, "--"); i >= 0 {
		files, hidden = args[:i], args[i+1:]
	}
	out := CredentialProbe{Files: map[string]CredentialFileProbe{}, Hidden: map[string]string{}}
	errOf := func(err error) string {
		if err == nil {
			return "" // the attack worked
		}
		return err.Error()
	}
	for _, f := range files {
		p := CredentialFileProbe{Attacks: map[string]string{}}
		try := func(name string, err error) { p.Attacks[name] = errOf(err) }
		w, err := os.OpenFile(f, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.Write([]byte("x"))
			w.Close()
		}
		try("write", err)
		w, err = os.OpenFile(f, os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			w.Close()
		}
		try("truncate", err)
		try("chmod", os.Chmod(f, 0o666))
		try("chown", os.Chown(f, os.Getuid(), os.Getgid()))
		try("unlink", syscall.Unlink(f))
		sib := f + ".planted"
		if err := os.WriteFile(sib, []byte("planted"), 0o644); err == nil {
			try("rename over", syscall.Rename(sib, f))
			os.Remove(sib)
		} else {
			p.Attacks["rename over"] = "no sibling to rename: " + err.Error()
		}
		try("rename away", syscall.Rename(f, f+".moved"))
		try("umount", syscall.Unmount(f, 0))
		try("umount detach", syscall.Unmount(f, syscall.MNT_DETACH))
		try("umount expire", syscall.Unmount(f, syscall.MNT_EXPIRE))
		try("mount over", syscall.Mount("/dev/null", f, "", syscall.MS_BIND, ""))
		if _, err := osexec.LookPath("unshare"); err == nil {
			b, err := osexec.Command("unshare", "-Urm", "umount", f).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(b)))
			}
			try("unshare umount", err)
		}
		if b, err := os.ReadFile(f); err != nil {
			p.Data = "read: " + err.Error()
		} else {
			p.Data = string(b)
		}
		if fi, err := os.Stat(f); err == nil {
			p.Mode = uint32(fi.Mode().Perm())
		}
		out.Files[f] = p
	}
	for _, h := range hidden {
		switch _, err := os.Stat(h); {
		case err == nil:
			out.Hidden[h] = "visible"
		case errors.Is(err, os.ErrNotExist):
			out.Hidden[h] = "absent"
		default:
			out.Hidden[h] = err.Error()
		}
	}
	env, _ := os.ReadFile("/proc/self/environ")
	out.Environ = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	b, _ := json.Marshal(out)
	fmt.Printf("PROBE %s\n", b)
	os.Exit(0)
}

// CredentialProbeArgs is the command that runs CredentialProbeMain from
// bin (a copy of the test binary the sandbox can run) on files, hidden.
func CredentialProbeArgs(bin string, files, hidden []string) []string {
	return append(append(append([]string{bin, CredentialProbeArg}, files...), "--"), hidden...)
}

// CheckCredentialProbe checks what CredentialProbeMain printed in
// stdout: each of files (path inside -> placeholder) holds exactly its
// placeholder, 0444, after every attack failed; each hidden path is
// absent; env (NAME=placeholder) is in the environment, and value (the
// real one) is nowhere in it.
func CheckCredentialProbe(t *testing.T, stdout string, files map[string]string, env, value string) {
	t.Helper()
	var p CredentialProbe
	for _, line := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "PROBE "); ok {
			if err := json.Unmarshal([]byte(rest), &p); err != nil {
				t.Fatalf("probe output %q: %v", rest, err)
			}
		}
	}
	if p.Files == nil {
		t.Fatalf("the credential probe printed nothing:\n%s", stdout)
	}
	for f, ph := range files {
		got := p.Files[f]
		if got.Data != ph {
			t.Errorf("%s inside holds %q, want its placeholder %q", f, got.Data, ph)
		}
		if got.Mode != 0o444 {
			t.Errorf("%s inside has mode %o, want 444", f, got.Mode)
		}
		for a, err := range got.Attacks {
			if err == "" {
				t.Errorf("%s inside: %s succeeded", f, a)
			}
		}
		t.Logf("%s: %v", f, got.Attacks)
	}
	for h, st := range p.Hidden {
		if st != "absent" {
			t.Errorf("%s inside: %s, want it absent", h, st)
		}
	}
	if !slices.Contains(p.Environ, env) {
		t.Errorf("the environment inside has no %s: %q", env, p.Environ)
	}
	for _, kv := range p.Environ {
		if strings.Contains(kv, value) {
			t.Errorf("the real value is in /proc/self/environ inside: %q", kv)
		}
	}
}

// CheckCredentialLoss fails the test unless loss (Map's) says, in an
// info item, where each of files (path inside -> placeholder) goes, and
// no item holds a placeholder.
func CheckCredentialLoss(t *testing.T, loss provider.LossReport, files map[string]string) {
	t.Helper()
	for f, ph := range files {
		if !slices.ContainsFunc(loss, func(l provider.Loss) bool {
			return l.Severity == provider.SeverityInfo && l.Area == "credentials" && strings.Contains(l.Message, f)
		}) {
			t.Errorf("Map says nothing of the credential file %s: %v", f, loss)
		}
		for _, l := range loss {
			if strings.Contains(l.Message, ph) {
				t.Errorf("a loss holds the placeholder %s: %+v", ph, l)
			}
		}
	}
}
