//go:build linux

package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	tag := "corral-test/trust-links:" + strings.TrimPrefix(provider.NewID(), "corral-")
	id, err := commitImage(ctx, cli, policy.DefaultDockerImage, &buf, tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), id, client.ImageRemoveOptions{Force: true}) })
	return tag
}

// commitImage commits, as tag, image from with the tar stream content
// extracted at its root, and returns the new image's id.
func commitImage(ctx context.Context, cli *client.Client, from string, content io.Reader, tag string) (string, error) {
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: from, Cmd: []string{"/bin/sh"}}})
	if err != nil {
		return "", err
	}
	defer cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.CopyToContainer(ctx, c.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: content}); err != nil {
		return "", err
	}
	img, err := cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Reference: tag})
	return img.ID, err
}

// javaRepo is the repository of javaImage's images.
const javaRepo = "corral-test/java"

var javaImg struct {
	once            sync.Once
	tarball, distro string // the two layouts' tags
	err             error
	why             string // when the host has no java
}

// javaImage is corral/base:1 with the host's JVM (the home of the java
// on PATH: bin/java, lib and conf, links dereferenced; the shared
// libraries its launcher and core libraries load, at their paths;
// /usr/bin/java, a link to it), as an image with a JVM has it, in one of
// two layouts. distro: Debian's, the JVM's lib/security/cacerts a link
// to /etc/ssl/certs/java/cacerts, a file of the image (the host's).
// Otherwise a JDK tarball's (Temurin's images): cacerts a file of the
// JVM's own, no distro store. Both are built once per JVM and base image
// (tagged by a hash of their files' names, sizes and times) and kept for
// later runs (the build removes the tags of earlier ones). When the host
// has no java: none, and why.
func javaImage(t *testing.T, cli *client.Client, distro bool) (tag, why string) {
	t.Helper()
	javaImg.once.Do(func() { javaImg.tarball, javaImg.distro, javaImg.why, javaImg.err = buildJavaImages(cli) })
	switch {
	case javaImg.why != "":
		return "", javaImg.why
	case javaImg.err != nil:
		t.Fatalf("java image: %v", javaImg.err)
	case distro:
		return javaImg.distro, ""
	}
	return javaImg.tarball, ""
}

func buildJavaImages(cli *client.Client) (tarball, distro, why string, err error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return "", "", "no java on PATH, so no image with a JVM: the JVM's trust in a container was not tried (.ci/run installs default-jre-headless)", nil
	}
	if java, err = filepath.EvalSymlinks(java); err != nil {
		return "", "", "", err
	}
	home := filepath.Dir(filepath.Dir(java))
	cacerts := filepath.Join(home, "lib/security/cacerts")
	files := map[string]string{"usr/bin/java": "->" + java} // in the image: from the host (a link: "->" its target)
	err = filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(home, p)
		top, _, _ := strings.Cut(rel, "/")
		switch {
		case err != nil:
			return err
		case rel == "." || d.IsDir():
			if rel == "." || top == "lib" || top == "conf" || rel == "bin" {
				return nil
			}
			return fs.SkipDir
		case !(top == "lib" || top == "conf" || rel == "bin/java" || rel == "release") || rel == "lib/src.zip" || rel == "lib/ct.sym":
			return nil
		}
		files[strings.TrimPrefix(p, "/")] = p
		return nil
	})
	if err != nil {
		return "", "", "", err
	}
	out, err := exec.Command("ldd", java, filepath.Join(home, "lib/server/libjvm.so"), filepath.Join(home, "lib/libjava.so"), filepath.Join(home, "lib/libnet.so"), filepath.Join(home, "lib/libnio.so"), filepath.Join(home, "lib/libzip.so")).Output()
	if err != nil {
		return "", "", "", fmt.Errorf("ldd %s: %v", java, err)
	}
	for _, m := range regexp.MustCompile(`(/\S+) \(0x`).FindAllStringSubmatch(string(out), -1) {
		files[strings.TrimPrefix(filepath.Clean(m[1]), "/")] = m[1]
	}
	ctx := context.Background()
	base, err := cli.ImageInspect(ctx, policy.DefaultDockerImage)
	if err != nil {
		return "", "", "", err
	}
	names := slices.Sorted(maps.Keys(files))
	h := sha256.New()
	fmt.Fprintln(h, base.ID)
	for _, n := range names {
		fi, err := os.Stat(strings.TrimPrefix(files[n], "->"))
		if err != nil {
			return "", "", "", err
		}
		fmt.Fprintf(h, "%s %s %d %d\n", n, files[n], fi.Size(), fi.ModTime().UnixNano())
	}
	tag := javaRepo + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	tarball, distro = tag, tag+"-distro"
	if _, err := cli.ImageInspect(ctx, distro); err == nil {
		return tarball, distro, "", nil
	}
	// The tarball layout: every file as the host has it, links followed.
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		dirs := map[string]bool{}
		err := func() error {
			for _, n := range names {
				for d := filepath.Dir(n); d != "." && !dirs[d]; d = filepath.Dir(d) {
					dirs[d] = true
					if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
						return err
					}
				}
				if to, ok := strings.CutPrefix(files[n], "->"); ok {
					if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: n, Linkname: to, Mode: 0o777}); err != nil {
						return err
					}
					continue
				}
				if err := tarFile(tw, n, files[n]); err != nil {
					return err
				}
			}
			return tw.Close()
		}()
		pw.CloseWithError(err)
	}()
	if _, err := commitImage(ctx, cli, policy.DefaultDockerImage, pr, tarball); err != nil {
		pr.CloseWithError(err)
		return "", "", "", fmt.Errorf("commit %s: %w", tarball, err)
	}
	// Debian's: cacerts a link to the distro store, which the image has.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(cacerts, "/"), Linkname: provider.JavaTrustStorePaths[0], Mode: 0o777})
	for d := filepath.Dir(provider.JavaTrustStorePaths[0]); err == nil && d != "/"; d = filepath.Dir(d) {
		err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755})
	}
	if err == nil {
		err = tarFile(tw, strings.TrimPrefix(provider.JavaTrustStorePaths[0], "/"), cacerts)
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		_, err = commitImage(ctx, cli, tarball, &buf, distro)
	}
	if err != nil {
		return "", "", "", fmt.Errorf("commit %s: %w", distro, err)
	}
	// Earlier builds (another JVM or base image) are of no more use.
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", javaRepo)})
	if err == nil {
		for _, im := range imgs.Items {
			for _, r := range im.RepoTags {
				if r != tarball && r != distro {
					_, _ = cli.ImageRemove(ctx, r, client.ImageRemoveOptions{})
				}
			}
		}
	}
	return tarball, distro, "", nil
}

// tarFile writes the host file from (links followed) to tw as name.
func tarFile(tw *tar.Writer, name, from string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size()}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
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

// A JVM whose own store is elsewhere (a JDK tarball's image, no distro
// Java store): the container's store is at JavaTrustStorePath alone and
// JAVA_TOOL_OPTIONS names it, after the options the policy gives, which
// stay; the JVM trusts the inspected origin with no option of its own,
// and does not without JAVA_TOOL_OPTIONS (the conformance suite's
// InspectedEgress tests the distro layout, where nothing is set).
func TestTrustJava(t *testing.T) {
	p := needSandboxes(t)
	img, why := javaImage(t, p.facts().cli, false)
	if why != "" {
		t.Skip(why)
	}
	h := harness(t, p, false)
	h.Inspect = func(pol *policy.Policy) {
		pol.Docker = &policy.Docker{Image: img}
		pol.Process.Env.Set = map[string]string{"JAVA_TOOL_OPTIONS": "-Dcorral.test=kept"}
	}
	providertest.RunInspected(t, h)
}

// The Java store goes over only the distro paths that hold a file (of
// the image or a host bind), never one Docker would create, while the
// bundle goes over every one it may make; both at their own path, on a
// tmpfs too.
func TestTrustTargets(t *testing.T) {
	host := filepath.Join(t.TempDir(), "java")
	if err := os.MkdirAll(filepath.Join(host, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "x", "cacerts"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	image := map[string]bool{provider.JavaTrustStorePaths[1]: true} // in the image; the rest absent
	resolve := func(p string) imagePath { return imagePath{real: p, exists: image[p]} }
	for _, c := range []struct {
		sp          Spec
		store, pems []string
	}{
		{Spec{Tmpfs: []Tmpfs{{Path: "/run"}}},
			[]string{provider.JavaTrustStorePath, provider.JavaTrustStorePaths[1]},
			append([]string{provider.TrustBundlePath}, provider.TrustBundlePaths...)},
		{Spec{Tmpfs: []Tmpfs{{Path: "/run"}, {Path: "/etc/pki"}}, Binds: []Bind{{Source: host, Target: "/etc/ssl/certs/java", Dir: true}}},
			[]string{provider.JavaTrustStorePath},
			[]string{provider.TrustBundlePath, "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"}},
		{Spec{Binds: []Bind{{Source: filepath.Join(host, "x"), Target: "/etc/ssl/certs/java", Dir: true}, {Target: provider.JavaTrustStorePaths[1], Mask: true}}},
			[]string{provider.JavaTrustStorePath, provider.JavaTrustStorePaths[0]},
			append([]string{provider.TrustBundlePath}, provider.TrustBundlePaths...)},
	} {
		for _, k := range trustKinds {
			got, notes := trustTargets(&c.sp, k, resolve)
			want := c.pems
			if k.Store {
				want = c.store
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s with binds %v, tmpfs %v: targets %v, want %v (notes %v)", k.What, c.sp.Binds, c.sp.Tmpfs, got, want, notes)
			}
		}
	}
}
