//go:build linux

package docker

import (
	"archive/tar"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/moby/moby/client"
)

// BaseImageLabel marks images built by BuildBase.
const BaseImageLabel = "io.corral.base-image"

// BuildBase builds Corral's base image from a static busybox on this host
// (Debian's busybox-static package: /bin/busybox) and imports it into the
// daemon as tag: busybox and its applets, /etc/passwd and /etc/group with
// root and nobody, and the usual empty directories. Nothing is pulled.
// Corral's own binary is not in it: the provider mounts it into every
// container. It returns the image id.
func BuildBase(ctx context.Context, tag, busybox string) (string, error) {
	if busybox == "" {
		p, err := exec.LookPath("busybox")
		if err != nil {
			return "", fmt.Errorf("busybox not found: install Debian's busybox-static package, or pass --busybox PATH")
		}
		busybox = p
	}
	if err := checkStatic(busybox); err != nil {
		return "", err
	}
	list, err := exec.CommandContext(ctx, busybox, "--list-full").Output()
	if err != nil {
		return "", fmt.Errorf("%s --list-full: %v", busybox, err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	defer pr.Close() // if the import fails early, the writer stops too
	go func() { pw.CloseWithError(writeBaseTar(pw, bb, strings.Fields(string(list)))) }()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, tag, client.ImageImportOptions{
		Message: "corral image build-base",
		Changes: []string{
			"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LABEL " + BaseImageLabel + "=1",
			"CMD [\"/bin/sh\"]",
		},
	})
	if err != nil {
		return "", fmt.Errorf("docker: import %s: %w", tag, err)
	}
	defer res.Close()
	if _, err := io.Copy(io.Discard, res); err != nil {
		return "", err
	}
	insp, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		return "", fmt.Errorf("docker: the imported image %s: %w", tag, err)
	}
	return insp.ID, nil
}

func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %v", p, err)
	}
	defer f.Close()
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the base image needs a static busybox (Debian's busybox-static)", p)
		}
	}
	return nil
}

// writeBaseTar writes the base image's root filesystem.
func writeBaseTar(w io.Writer, busybox []byte, applets []string) error {
	tw := tar.NewWriter(w)
	mtime := time.Unix(0, 0)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "usr/local", "usr/local/bin", "etc", "home", "dev", "proc", "sys", "run", "var", "opt"} {
		if err := dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return err
	}
	if err := dir("root", 0o700); err != nil {
		return err
	}
	if err := file("bin/busybox", 0o755, busybox); err != nil {
		return err
	}
	for _, a := range applets {
		a = path.Clean(strings.TrimPrefix(a, "/"))
		if a == "bin/busybox" || strings.Contains(a, "..") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: a, Linkname: "/bin/busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":         "root:x:0:\nnogroup:x:65534:\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
		"etc/os-release":    "NAME=\"Corral base\"\nID=corral-base\nVERSION_ID=1\n",
	}
	for _, name := range []string{"etc/group", "etc/nsswitch.conf", "etc/os-release", "etc/passwd"} {
		if err := file(name, 0o644, []byte(files[name])); err != nil {
			return err
		}
	}
	return tw.Close()
}
