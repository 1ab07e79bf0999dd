package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/policy"
)

// A Windows policy written anywhere validates with --os windows, and its
// explain shows the MXC plan without an executor (issue 18's checks);
// the dangerous forms are refused with file:line:col, exit 122.
func TestPolicyValidateWindowsAnywhere(t *testing.T) {
	if policy.HostOS() == policy.OSWindows {
		t.Skip("off-Windows resolution; on Windows the policy resolves against the host (policy's Windows-host tests)")
	}
	t.Setenv("USERPROFILE", `C:\Users\me`)
	t.Setenv("PATH", t.TempDir()) // no wxc-exec
	t.Setenv("CORRAL_MXC_WXC_EXEC", "")
	dir := t.TempDir()
	good := filepath.Join(dir, "win.yaml")
	if err := os.WriteFile(good, []byte("version: 1\nfilesystem:\n  read_only: ['C:\\Tools', 'c:/program files/Git']\n  read_write: ['~\\src\\proj']\n  deny: ['{workdir}\\secrets']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text, err := runPolicyCmd(t, "validate", "--os", "windows", good)
	out := string(text)
	if err != nil || !strings.Contains(out, "valid (windows policy") || !strings.Contains(out, "mxc provider") {
		t.Fatalf("validate --os windows: %v\n%s", err, out)
	}
	text, err = runPolicyCmd(t, "explain", "--os", "windows", "--provider", "mxc", good)
	out = string(text)
	for _, want := range []string{`rw    C:\Users\me\src\proj`, `deny  C:\Users\me\work\secrets`, "host:     mxc is not available here", `"readonlyPaths"`} {
		if want == `"readonlyPaths"` {
			out2, _ := runPolicyCmd(t, "explain", "--os", "windows", "--provider", "mxc", "-o", "json", good)
			if !strings.Contains(string(out2), want) || !strings.Contains(string(out2), `"available": false`) {
				t.Errorf("explain -o json lacks the document or the host fact:\n%s", out2)
			}
			continue
		}
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("explain lacks %q (%v):\n%s", want, err, out)
		}
	}

	bad := filepath.Join(dir, "unc.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nfilesystem:\n  read_only:\n    - 'C:\\Tools'\n    - '\\\\server\\share'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = runPolicyCmd(t, "validate", "--os", "windows", bad)
	if err == nil || !isPolicyError(err) || !strings.HasPrefix(err.Error(), bad+":5:7: ") || !strings.Contains(err.Error(), "network share") {
		t.Errorf("UNC policy: %v, want a positioned policy error (exit 122)", err)
	}
	if _, err := runPolicyCmd(t, "validate", "--os", "beos", good); err == nil || isPolicyError(err) {
		t.Errorf("--os beos: %v, want a usage error", err)
	}
}

// policy default --os windows prints the Windows default, which parses as
// a Windows policy and is the built-in one.
func TestPolicyDefaultWindows(t *testing.T) {
	text, err := runPolicyCmd(t, "default", "--os", "windows")
	if err != nil {
		t.Fatal(err)
	}
	out := string(text)
	p, err := policy.ParseFor(text, "default.yaml", policy.OSWindows)
	if err != nil {
		t.Fatal(err)
	}
	if policy.Hash(p) != policy.Hash(policy.DefaultFor(policy.OSWindows)) || !strings.Contains(out, `C:\Windows`) {
		t.Errorf("policy default --os windows is not the Windows default:\n%s", out)
	}
}
