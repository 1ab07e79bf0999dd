//go:build linux

package linux

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestEmbeddedInitCurrent: the embedded init was built from the sources
// as they are (gen_init.sh --check), so no sandbox runs an init older
// than the code beside it.
func TestEmbeddedInitCurrent(t *testing.T) {
	if embeddedInit == "" {
		t.Skip("no embedded init: go generate ./provider/linux builds one")
	}
	if out, err := exec.Command("sh", "gen_init.sh", "--check").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// TestInitRunsEmbedded: with an embedded init, a sandbox's pid 1 is that
// program, run from its sealed memfd, not corral's binary; and the
// memfd cannot be changed.
func TestInitRunsEmbedded(t *testing.T) {
	if embeddedInit == "" {
		t.Skip("no embedded init: go generate ./provider/linux builds one")
	}
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("runs a real sandbox as root")
	}
	f, why := initExe()
	if f == nil {
		t.Fatalf("init is corral's own binary: %s", why)
	}
	path := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	// Sealed: not even this process can change it (checked while no
	// init runs it, which would refuse a writer anyway: ETXTBSY).
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		_, werr := f.Write([]byte("x"))
		f.Close()
		if werr == nil {
			t.Fatal("the init's memfd took a write")
		}
	}
	needPureGo(t)
	wd, home := workdirs(t, 65534)
	sb, sh := startShell(t, consentPlan(t, wd, home, false, nil))
	if out := sh.must(t, "echo ok"); !strings.Contains(out, "ok") {
		t.Fatalf("the shell inside said %q", out)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", sb.InitPID()))
	if err != nil || !strings.HasPrefix(exe, "/memfd:corral-init") {
		t.Fatalf("init's executable is %q (%v), want the memfd corral-init", exe, err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != embeddedInit {
		t.Fatalf("the memfd does not hold the embedded init (%d bytes, %v)", len(b), err)
	}
}

// An init older than its supervisor refuses a spec field it does not
// know instead of ignoring it.
func TestDecodeSpecRefusesUnknown(t *testing.T) {
	b, err := json.Marshal(&InitSpec{UID: 65534, Hostname: "corral"})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := decodeSpec(b); err != nil || s.UID != 65534 || s.Hostname != "corral" {
		t.Fatalf("a current spec: %+v, %v", s, err)
	}
	newer := append(b[:len(b)-1:len(b)-1], []byte(`,"a_layer_added_later":true}`)...)
	if _, err := decodeSpec(newer); err == nil || !strings.Contains(err.Error(), "a_layer_added_later") {
		t.Fatalf("a spec with a field this init does not know: %v, want it refused", err)
	}
}
