//go:build linux

package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/providertest"
)

// linkImage is corral/base:1 with links at the distro bundle paths, as
// images have them (Alpine's /etc/ssl/cert.pem, Fedora's
// /etc/pki/tls/certs/ca-bundle.crt), their targets absent; it is
// removed after the test.
func linkImage(t *testing.T, cli *client.Client, links map[string]string) string {
	t.Helper()
	ctx := context.Background()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for name, to := range links {
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: to, Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	for d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: policy.DefaultDockerImage, Cmd: []string{"/bin/sh"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.CopyToContainer(ctx, c.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf}); err != nil {
		t.Fatal(err)
	}
	tag := "corral-test/trust-links:" + strings.TrimPrefix(provider.NewID(), "corral-")
	img, err := cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Reference: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true}) })
	return tag
}

// In an image whose distro bundle paths are symlinks, the runtime
// follows them within the container's root: the files they name hold
// the bundle, which Start verifies from outside (each path resolved in
// the container's root to the bundle's inode).
func TestTrustImageSymlinks(t *testing.T) {
	p := needSandboxes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wd := providertest.PublicDir(t)
	planted := filepath.Join(wd, "planted.pem")
	tag := linkImage(t, p.facts().cli, map[string]string{
		"etc/ssl/cert.pem":                "certs/ca-certificates.crt",
		"etc/pki/tls/certs/ca-bundle.crt": "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"etc/ssl/ca-bundle.pem":           "../.." + planted, // into the workdir, a host bind
	})
	if os.Geteuid() == 0 {
		if err := os.Chown(wd, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	pol := policy.Default()
	pol.Docker = &policy.Docker{Image: tag}
	pol.Network.Mode = policy.NetworkProxy
	pol.Network.Allow = []policy.Endpoint{{Host: "api.allowed.test", Access: policy.HTTPReadOnly}}
	r, err := pol.Resolve(policy.Context{Home: providertest.PublicDir(t), Workdir: wd, Environ: []string{"PATH=" + policy.DefaultPATH}})
	if err != nil {
		t.Fatal(err)
	}
	plan, loss := p.Map(ctx, r)
	if loss.HasErrors() {
		t.Fatal(provider.Rejected(loss))
	}
	if !slices.ContainsFunc(loss, func(l provider.Loss) bool {
		return l.Severity == provider.SeverityWarning && strings.Contains(l.Message, "/etc/ssl/ca-bundle.pem: the image's symlink leads to "+planted)
	}) {
		t.Errorf("Map does not warn of the link into the workdir: %v", loss)
	}
	bundle := "bundle-" + provider.NewID()
	sb, err := p.Provision(ctx, plan, provider.ProvisionOptions{Trust: []byte(bundle + "\n")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Stop(context.Background()); _ = sb.Deprovision(context.Background()) })
	if err := sb.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if d := provider.StateOf(sb.Layers(), policy.LayerMounts); d != provider.LayerActive {
		t.Errorf("mounts layer %s", d)
	}
	for _, l := range sb.Layers() {
		if l.Layer == policy.LayerMounts && !strings.Contains(l.Detail, "CA bundle") {
			t.Errorf("the mounts layer does not say the CA bundle was verified: %s", l.Detail)
		}
	}
	paths := []string{provider.TrustBundlePath, "/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/cert.pem", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"}
	var script strings.Builder
	for _, p := range append(paths, "/etc/ssl/ca-bundle.pem") {
		script.WriteString(`echo "` + p + `: $(head -n1 ` + p + ` 2>&1)"` + "\n")
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sb.Exec(ctx, provider.ExecSpec{Args: []string{"sh", "-c", script.String()}, Stdout: out, Stderr: out})
	b, _ := os.ReadFile(out.Name())
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v %v %s", st, err, b)
	}
	t.Logf("inside:\n%s", b)
	for _, p := range paths {
		if !strings.Contains(string(b), p+": "+bundle+"\n") {
			t.Errorf("%s does not hold the bundle inside", p)
		}
	}
	if strings.Contains(string(b), "/etc/ssl/ca-bundle.pem: "+bundle) {
		t.Error("the bundle is at /etc/ssl/ca-bundle.pem, whose link leads into the workdir")
	}
	if _, err := os.Lstat(planted); err == nil {
		t.Errorf("the runtime created %s on the host, following the image's link", planted)
	}
}

// A grant that shows the state base (a directory above it, or one inside
// it) is an error loss naming its field; one that denies it, or none, is
// not.
func TestStateExposed(t *testing.T) {
	base := "/tmp/corral-1000/docker"
	for _, c := range []struct {
		grants []policy.PathGrant
		field  string
	}{
		{[]policy.PathGrant{{Path: "/tmp", Access: policy.AccessReadWrite, Dir: true, Field: "filesystem.read_write[0]"}}, "filesystem.read_write[0]"},
		{[]policy.PathGrant{{Path: "/tmp/corral-1000/docker/x", Access: policy.AccessReadOnly, Dir: true, Field: "filesystem.read_only[1]"}}, "filesystem.read_only[1]"},
		{[]policy.PathGrant{{Path: "/tmp", Access: policy.AccessReadWrite, Dir: true, Field: "a"}, {Path: "/tmp/corral-1000", Access: policy.AccessDeny, Dir: true, Field: "b"}}, ""},
		{[]policy.PathGrant{{Path: "/home", Access: policy.AccessReadWrite, Dir: true, Field: "c"}}, ""},
	} {
		l := stateExposed(&policy.Resolved{Grants: c.grants}, base)
		if c.field == "" && l != nil || c.field != "" && (l == nil || l.Field != c.field || l.Severity != provider.SeverityError) {
			t.Errorf("grants %v: %+v, want an error loss for %q", c.grants, l, c.field)
		}
	}
}
