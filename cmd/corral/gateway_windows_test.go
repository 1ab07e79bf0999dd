package main

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
	"github.com/corral-sandbox/corral/internal/winfile"
)

// writeToken makes path holding tok with the security descriptor of SDDL
// sddl, %s in it standing for the caller's SID.
func writeToken(t *testing.T, path, sddl, tok string) {
	t.Helper()
	user, err := winfile.User()
	if err != nil {
		t.Fatal(err)
	}
	sd, err := windows.SecurityDescriptorFromString(strings.ReplaceAll(sddl, "%s", user.String()))
	if err != nil {
		t.Fatal(err)
	}
	h, err := winfile.Open(path, windows.FILE_WRITE_DATA|windows.SYNCHRONIZE, windows.FILE_CREATE, windows.FILE_NON_DIRECTORY_FILE, sd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(h), path)
	defer f.Close()
	if _, err := f.WriteString(tok + "\n"); err != nil {
		t.Fatal(err)
	}
}

// loadToken makes a missing token (and its directory): 32 random bytes in
// hex, read back the same by the gateway and by a client.
func TestLoadTokenCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw", "token")
	tok, err := loadToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(tok); err != nil || len(b) != 32 {
		t.Errorf("token %q: want 32 bytes in hex", tok)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != tok+"\n" {
		t.Errorf("%s holds %q (%v), want the token and a newline", path, b, err)
	}
	if again, err := loadToken(path); err != nil || again != tok {
		t.Errorf("loadToken again = %q, %v; want %q", again, err, tok)
	}
	if c, err := readClientToken(path); err != nil || c != tok {
		t.Errorf("readClientToken = %q, %v; want %q", c, err, tok)
	}
}

// A token file whose DACL lets Everyone read it is refused by the gateway
// and by a client, saying who may read it and how to stop that.
func TestTokenRefusesEveryoneRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	writeToken(t, path, "O:%sD:P(A;;FA;;;%s)(A;;FR;;;WD)", "secret")
	_, err := loadToken(path)
	if err == nil || !strings.Contains(err.Error(), "S-1-1-0") || !strings.Contains(err.Error(), "others could read") ||
		!strings.Contains(err.Error(), `icacls "`+path+`" /remove:g *S-1-1-0`) {
		t.Errorf("loadToken = %v, want Everyone's read refused with the icacls fix", err)
	}
	_, err = readClientToken(path)
	if err == nil || !strings.Contains(err.Error(), "S-1-1-0") || !strings.Contains(err.Error(), "others could read the token") {
		t.Errorf("readClientToken = %v, want Everyone's read refused", err)
	}
}

// A token file with a second hard link is refused: whoever made the link
// reads the token.
func TestLoadTokenRefusesHardLink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if _, err := loadToken(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path, filepath.Join(dir, "copy")); err != nil {
		t.Fatal(err)
	}
	if _, err := loadToken(path); err == nil || !strings.Contains(err.Error(), "has 2 hard links") {
		t.Errorf("loadToken = %v, want 2 hard links refused", err)
	}
}

// worldWritable is a directory whose DACL lets Everyone delete its
// entries and add to it. Under Wine, which keeps a DACL only as Unix mode
// bits and maps no write right of Everyone's to them, a directory made
// with such a DACL reads back without it, so Z:\tmp (the Unix /tmp, mode
// 1777, whose DACL Wine reads back with Everyone's 0x1301ff) stands in.
func worldWritable(t *testing.T) string {
	if wine.Detected() {
		return `Z:\tmp`
	}
	user, err := winfile.User()
	if err != nil {
		t.Fatal(err)
	}
	sd, err := windows.SecurityDescriptorFromString("O:" + user.String() + "D:P(A;OICI;FA;;;" + user.String() + ")(A;OICI;0x1301bf;;;WD)")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "shared")
	h, err := winfile.Walk{Mkdir: sd}.OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	windows.CloseHandle(h)
	return dir
}

// A token, or a log directory, under a directory others may write is
// refused, naming it, and nothing is made there.
func TestTrustRefusesWorldWritableDir(t *testing.T) {
	shared := worldWritable(t)
	name := "corral-test-" + hex.EncodeToString([]byte(t.Name()))[:16]
	for _, c := range []struct {
		name string
		do   func(string) error
	}{
		{"loadToken", func(p string) error { _, err := loadToken(filepath.Join(p, "token")); return err }},
		{"makeGatewayDir", func(p string) error { return makeGatewayDir(filepath.Join(p, "logs")) }},
		{"makeGatewayDir last", makeGatewayDir},
	} {
		p := filepath.Join(shared, name)
		if c.name == "makeGatewayDir last" {
			p = shared
		}
		err := c.do(p)
		if err == nil || !strings.Contains(err.Error(), shared+" lets ") || !strings.Contains(err.Error(), "S-1-1-0") {
			t.Errorf("%s(%s) = %v, want %s refused as others'", c.name, p, err, shared)
		}
		if _, err := os.Lstat(filepath.Join(shared, name)); !os.IsNotExist(err) {
			os.RemoveAll(filepath.Join(shared, name))
			t.Errorf("%s made %s under %s (%v)", c.name, name, shared, err)
		}
	}
}

// makeGatewayDir makes missing directories the caller's alone.
func TestMakeGatewayDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gw", "logs")
	if err := makeGatewayDir(dir); err != nil {
		t.Fatal(err)
	}
	user, err := winfile.User()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(dir), dir} {
		h, err := winfile.Walk{}.OpenDir(p, windows.READ_CONTROL)
		if err != nil {
			t.Fatal(err)
		}
		if err := winfile.Private(h, user); err != nil {
			t.Errorf("%s %v", p, err)
		}
		windows.CloseHandle(h)
	}
	if err := makeGatewayDir(dir); err != nil {
		t.Errorf("makeGatewayDir of an existing directory of ours: %v", err)
	}
}

// One gateway per database: a second lock fails, naming the database,
// while the first is held, and succeeds once it is released.
func TestLockGatewayDB(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gateway.db")
	release, err := lockGatewayDB(db)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := lockGatewayDB(db); err == nil || !strings.Contains(err.Error(), db+": another gateway uses this database") {
		if err == nil {
			r()
		}
		t.Errorf("second lockGatewayDB = %v, want it refused", err)
	}
	release()
	r, err := lockGatewayDB(db)
	if err != nil {
		t.Fatalf("lockGatewayDB after release: %v", err)
	}
	r()
}
