package jks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testcert"
)

// TestKeytoolReadsIt: Java's own keytool lists the entries, and checks
// the digest when given the password (a wrong one fails).
func TestKeytoolReadsIt(t *testing.T) {
	keytool, err := exec.LookPath("keytool")
	if err != nil {
		t.Skip("keytool (a JDK) is not installed")
	}
	var ders [][]byte
	for range 3 {
		c, err := testcert.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		ders = append(ders, c.Certificate[0])
	}
	b, err := TrustStore(ders, "changeit", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cacerts")
	os.WriteFile(path, b, 0o644)
	out, err := exec.Command(keytool, "-list", "-keystore", path, "-storetype", "JKS", "-storepass", "changeit").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Your keystore contains 3 entries") || strings.Count(string(out), "trustedCertEntry") != 3 {
		t.Fatalf("keytool -list: %v\n%s", err, out)
	}
	if out, err := exec.Command(keytool, "-list", "-keystore", path, "-storetype", "JKS", "-storepass", "wrongpass").CombinedOutput(); err == nil {
		t.Fatalf("keytool accepted a wrong password:\n%s", out)
	}
}
