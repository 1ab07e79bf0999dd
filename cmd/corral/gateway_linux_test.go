//go:build linux

package main

import (
	"errors"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/corral-sandbox/corral/provider"
)

// otherUID is the uid of the test user corral-test (tests run as root,
// which can give it files).
func otherUID(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	u, err := user.Lookup("corral-test")
	if err != nil {
		t.Skipf("no user corral-test: %v", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

func writeToken(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A missing token file is made 0600 and read back; one the gateway's uid
// owns in its own directories is read.
func TestLoadTokenCreatesAndReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "token")
	tok, err := loadToken(path)
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token: %q, %v", tok, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", fi, err)
	}
	if again, err := loadToken(path); err != nil || again != tok {
		t.Fatalf("read again: %q, %v; want %q", again, err, tok)
	}
}

// A token file another user could have written, or could replace, is
// refused with the path, the owner or mode, and the fix.
func TestLoadTokenRefusesUntrusted(t *testing.T) {
	other := otherUID(t)
	dir := t.TempDir()
	for name, c := range map[string]struct {
		setup func(path string)
		want  []string
	}{
		"another user's file": {func(p string) {
			writeToken(t, p)
			if err := os.Chown(p, other, other); err != nil {
				t.Fatal(err)
			}
		}, []string{"owned by uid " + strconv.Itoa(other), "chown"}},
		"readable by others": {func(p string) {
			writeToken(t, p)
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"mode 0644", "chmod 600"}},
		"world-writable directory": {func(p string) {
			if err := os.Chmod(filepath.Dir(p), 0o777); err != nil {
				t.Fatal(err)
			}
			writeToken(t, p)
		}, []string{"mode 0777", "chmod go-w"}},
		"another user's directory": {func(p string) {
			writeToken(t, p)
			if err := os.Chown(filepath.Dir(p), other, other); err != nil {
				t.Fatal(err)
			}
		}, []string{"owner uid " + strconv.Itoa(other)}},
		"symlink to a good token": {func(p string) {
			real := filepath.Join(filepath.Dir(p), "real")
			writeToken(t, real)
			if err := os.Symlink(real, p); err != nil {
				t.Fatal(err)
			}
		}, []string{"symbolic link"}},
		"fifo": {func(p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a regular file"}},
	} {
		sub := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(sub, "token")
		c.setup(path)
		tok, err := loadToken(path)
		if err == nil {
			t.Errorf("%s: accepted (token %q)", name, tok)
			continue
		}
		for _, w := range append(c.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", name, err, w)
			}
		}
	}
}

// Nothing is made under a directory another user could write.
func TestLoadTokenMakesNothingUnderUntrustedDir(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := loadToken(filepath.Join(open, "state", "token")); err == nil {
		t.Fatal("accepted a token under a world-writable directory")
	}
	if _, err := os.Lstat(filepath.Join(open, "state")); err == nil {
		t.Error("made a directory under the world-writable one")
	}
}

// A client's token file that others may read is refused, as ssh refuses
// such a private key; a 0600 one (through a link too) is read.
func TestReadClientToken(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readClientToken(tok); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a 0644 token file: %v", err)
	}
	if err := os.Chmod(tok, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(tok, link); err != nil {
		t.Fatal(err)
	}
	if got, err := readClientToken(link); err != nil || got != "secret" {
		t.Errorf("a 0600 token file through a link: %q, %v", got, err)
	}
}

// A policy error the gateway places in "policy:L:C" names the caller's
// file, as corral run's does; other text is left alone.
func TestAPIErrInNamesTheFile(t *testing.T) {
	err := apiErrIn(connect.NewError(connect.CodeInvalidArgument, errors.New("policy_rejected: policy:3:16: filesystem.read_write[0]: a link; the policy: see policy:x")), "/tmp/a$1/p.yaml")
	want := "gateway: /tmp/a$1/p.yaml:3:16: filesystem.read_write[0]: a link; the policy: see policy:x"
	if pe, ok := err.(*provider.Error); !ok || pe.Msg != want || pe.Code != provider.CodePolicyRejected {
		t.Errorf("got %#v, want %s message %q", err, provider.CodePolicyRejected, want)
	}
}

// --credential values are read on the client from the environment, a
// file or one line of stdin; a value on the command line is refused, and
// no error quotes it.
func TestReadCredential(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CORRAL_TEST_KEY", "  sk-from-env-0123456789 \n")
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("sk-from-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin := func(s string) *os.File {
		p := filepath.Join(t.TempDir(), "stdin")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	got, err := credentialFlags([]string{"a=env:CORRAL_TEST_KEY", "b=file:" + file, "c=-"}, stdin("sk-from-stdin-0123456789\nsecond line\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "sk-from-env-0123456789", "b": "sk-from-file-0123456789", "c": "sk-from-stdin-0123456789"}
	if len(got) != 3 {
		t.Fatalf("got %d values", len(got))
	}
	for _, v := range got {
		if want[v.Name] != v.Value {
			t.Errorf("%s = %q, want %q", v.Name, v.Value, want[v.Name])
		}
	}
	literal := "sk-literal-on-the-command-line"
	for _, specs := range [][]string{
		{"a=" + literal},         // the value itself
		{literal},                // no name at all
		{"=env:CORRAL_TEST_KEY"}, // no name
		{"a=env:CORRAL_TEST_UNSET_" + strconv.Itoa(os.Getpid())},
		{"a=file:" + filepath.Join(dir, "missing")},
		{"a=-", "b=-"}, // stdin once
	} {
		_, err := credentialFlags(specs, stdin("sk-x-0123456789\n"))
		if err == nil {
			t.Errorf("%q accepted", specs)
			continue
		}
		if strings.Contains(err.Error(), literal) {
			t.Errorf("%q: the error quotes the value: %v", specs, err)
		}
	}
	if _, err := credentialFlags([]string{"a=" + literal}, stdin("")); err == nil || !strings.Contains(err.Error(), "history") {
		t.Errorf("a literal value's error does not say why: %v", err)
	}
}

func TestExpiresAt(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]string{"": "", "90m": "2026-01-02T04:34:05Z", "2027-05-06T07:08:09+02:00": "2027-05-06T05:08:09Z"} {
		if got, err := expiresAt(in, now); err != nil || got != want {
			t.Errorf("expiresAt(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"-1h", "0s", "tomorrow", "2026-01-02"} {
		if _, err := expiresAt(in, now); err == nil {
			t.Errorf("expiresAt(%q) accepted", in)
		}
	}
}

// gateway serve says the address it listens on: for --listen IP:0 the
// port the kernel chose, for unix:PATH the path as given.
func TestListenAddr(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := listenAddr("127.0.0.1:0", l); got != l.Addr().String() || strings.HasSuffix(got, ":0") {
		t.Errorf("listenAddr(127.0.0.1:0) = %q, want %s", got, l.Addr())
	}
	if got := listenAddr("unix:/run/x.sock", l); got != "unix:/run/x.sock" {
		t.Errorf("listenAddr(unix:/run/x.sock) = %q", got)
	}
}

// The gateway's connect codes become Corral's exit codes
// (docs/exit-codes.md); a name already taken is a conflict, not a bug.
func TestAPIErrExitCodes(t *testing.T) {
	for code, want := range map[connect.Code]int{
		connect.CodeAlreadyExists:   117,
		connect.CodeAborted:         117,
		connect.CodeNotFound:        118,
		connect.CodeUnavailable:     121,
		connect.CodeInvalidArgument: 122,
		connect.CodeUnauthenticated: 121,
		connect.CodeInternal:        120,
	} {
		var pe *provider.Error
		if err := apiErr(connect.NewError(code, errors.New("x"))); !errors.As(err, &pe) || pe.Code.ExitCode() != want {
			t.Errorf("%s: %v, want exit %d", code, err, want)
		}
	}
}
