package isolation

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/corral-sandbox/corral/provider"
)

// export builds an export whose home.tar holds one entry h (with size
// bytes of data written, which may be fewer than h.Size).
func export(t *testing.T, h *tar.Header, data int) []byte {
	t.Helper()
	var home bytes.Buffer
	tw := tar.NewWriter(&home)
	if err := tw.WriteHeader(h); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, data))
	tw.Flush()
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	ow := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{manifestName, []byte(`{"version":1,"kind":"` + manifestKind + `","name":"imported"}`)},
		{policyName, []byte("version: 1\nnetwork: {mode: host}\n")},
		{homeName, home.Bytes()},
	} {
		if err := ow.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		ow.Write(f.data)
	}
	ow.Close()
	zw.Close()
	return out.Bytes()
}

// An export whose home holds a link, an absolute or .. name, or an
// oversized entry is refused before anything is provisioned (Provider
// is nil: a provision would panic).
func TestImportRefusesHostileHome(t *testing.T) {
	cases := []struct {
		why  string
		h    *tar.Header
		data int
		want string
	}{
		{"a symlink", &tar.Header{Name: ".ssh", Typeflag: tar.TypeSymlink, Linkname: "/root/.ssh"}, 0, "symlink"},
		{"an absolute name", &tar.Header{Name: "/etc/cron.d/x", Typeflag: tar.TypeReg, Size: 1}, 1, "absolute"},
		{"a .. name", &tar.Header{Name: "../../x", Typeflag: tar.TypeReg, Size: 1}, 1, `".." component`},
		{"an oversized entry", &tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 5 << 30}, 10, "more than the"},
	}
	for _, c := range cases {
		t.Run(c.why, func(t *testing.T) {
			base := t.TempDir()
			m := &Manager{Base: base}
			_, _, err := m.Import(context.Background(), "", bytes.NewReader(export(t, c.h, c.data)))
			if err == nil || !strings.Contains(err.Error(), c.want) || provider.CodeOf(err) != provider.CodePolicyRejected {
				t.Fatalf("import: %v, want policy_rejected with %q", err, c.want)
			}
			if ents, _ := os.ReadDir(base); len(ents) != 0 {
				t.Errorf("a refused import left %v", ents)
			}
		})
	}
}

// An export that is not one (another kind, a missing member) is refused.
func TestImportRefusesOtherArchives(t *testing.T) {
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	ow := tar.NewWriter(zw)
	ow.WriteHeader(&tar.Header{Name: manifestName, Size: 2, Typeflag: tar.TypeReg})
	ow.Write([]byte("{}"))
	ow.Close()
	zw.Close()
	m := &Manager{Base: t.TempDir()}
	if _, _, err := m.Import(context.Background(), "", &out); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Errorf("import of a manifest of no kind: %v", err)
	}
}
