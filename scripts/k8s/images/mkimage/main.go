// Command mkimage writes a one-layer OCI image archive (an OCI image layout
// in a tar: oci-layout, index.json, blobs/sha256/*; image-spec v1.1) that
// `ctr images import` loads under the name given, so the test cluster of
// scripts/k8s needs nothing pulled.
//
//	mkimage -name corral.local/busybox:1 -busybox /usr/bin/busybox -o busybox.tar
//	mkimage -name corral.local/pause:3.10 -file /pause=./pause -entrypoint '["/pause"]' -user 65535:65535 -o pause.tar
//
// -busybox lays out a root filesystem as provider/docker's BuildBase does
// (a static busybox, its applets as symlinks from `busybox --list-full`,
// /etc/passwd and /etc/group with root and nobody, the usual directories).
// -file DEST=SRC (repeatable) adds SRC's bytes at DEST, mode 0755. The
// layer is an uncompressed tar with owner 0:0 and mtime 0, so the archive
// is the same bytes for the same inputs. It prints "NAME sha256:MANIFEST".
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	name := flag.String("name", "", "image name NAME:TAG (required)")
	out := flag.String("o", "", "output archive path (required)")
	busybox := flag.String("busybox", "", "a static busybox to lay out a root filesystem from")
	entry := flag.String("entrypoint", "", "entrypoint as a JSON array")
	cmd := flag.String("cmd", "", "cmd as a JSON array")
	user := flag.String("user", "", "user[:group] the image runs as")
	var add files
	flag.Var(&add, "file", "DEST=SRC: add SRC at DEST, mode 0755 (repeatable)")
	flag.Parse()
	if *name == "" || *out == "" || !strings.Contains(*name, ":") {
		fmt.Fprintln(os.Stderr, "mkimage: -name NAME:TAG and -o OUT are required")
		os.Exit(2)
	}
	if err := run(*name, *out, *busybox, *entry, *cmd, *user, add); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(name, out, busybox, entry, cmd, user string, add []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uid, h.Gid, h.Format = mtime, 0, 0, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	file := func(n string, mode int64, data []byte) error {
		if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: mode, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if busybox != "" {
		if err := busyboxRoot(busybox, hdr, file); err != nil {
			return err
		}
	}
	for _, a := range add {
		dest, src, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("-file %q: want DEST=SRC", a)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := file(strings.TrimPrefix(path.Clean(dest), "/"), 0o755, data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cfg := map[string]any{
		"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		"WorkingDir": "/",
	}
	for k, v := range map[string]string{"Entrypoint": entry, "Cmd": cmd} {
		if v == "" {
			continue
		}
		var arr []string
		if err := json.Unmarshal([]byte(v), &arr); err != nil {
			return fmt.Errorf("-%s: %v", strings.ToLower(k), err)
		}
		cfg[k] = arr
	}
	if user != "" {
		cfg["User"] = user
	}
	ldig, ldata := blob(layer.Bytes())
	cdig, cdata := blob(mustJSON(map[string]any{
		"architecture": "amd64", "os": "linux", "config": cfg,
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{ldig}},
		"history": []map[string]string{{"created_by": "scripts/k8s/images/mkimage"}},
	}))
	mdig, mdata := blob(mustJSON(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": len(cdata)},
		"layers": []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ldig, "size": len(ldata)}},
	}))
	tag := name[strings.LastIndex(name, ":")+1:]
	idx := mustJSON(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdig, "size": len(mdata),
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
		}},
	})
	var arc bytes.Buffer
	aw := tar.NewWriter(&arc)
	put := func(n string, data []byte) error {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := aw.Write(data)
		return err
	}
	for _, e := range []struct {
		n string
		d []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idx},
		{"blobs/sha256/" + strings.TrimPrefix(ldig, "sha256:"), ldata},
		{"blobs/sha256/" + strings.TrimPrefix(cdig, "sha256:"), cdata},
		{"blobs/sha256/" + strings.TrimPrefix(mdig, "sha256:"), mdata},
	} {
		if err := put(e.n, e.d); err != nil {
			return err
		}
	}
	if err := aw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(out+".tmp", arc.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return err
	}
	fmt.Println(name, mdig)
	return nil
}

// busyboxRoot writes the root filesystem of provider/docker's base image.
func busyboxRoot(bb string, hdr func(*tar.Header) error, file func(string, int64, []byte) error) error {
	f, err := elf.Open(bb)
	if err != nil {
		return err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return fmt.Errorf("%s is dynamically linked: install Debian's busybox-static", bb)
		}
	}
	f.Close()
	list, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %v", bb, err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	dirs := map[string]int64{"tmp": 0o1777, "root": 0o700}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "usr/local", "usr/local/bin", "etc", "home", "dev", "proc", "sys", "run", "var", "opt"} {
		dirs[d] = 0o755
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirs[d]}); err != nil {
			return err
		}
	}
	if err := file("bin/busybox", 0o755, data); err != nil {
		return err
	}
	applets := strings.Fields(string(list))
	sort.Strings(applets)
	for _, a := range applets {
		a = path.Clean(strings.TrimPrefix(a, "/"))
		if a == "bin/busybox" || strings.Contains(a, "..") {
			continue
		}
		if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: a, Linkname: "/bin/busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	etc := []struct{ n, d string }{
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"},
		{"etc/os-release", "NAME=\"Corral base\"\nID=corral-base\nVERSION_ID=1\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
	}
	for _, e := range etc {
		if err := file(e.n, 0o644, []byte(e.d)); err != nil {
			return err
		}
	}
	return nil
}

func blob(b []byte) (string, []byte) {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:]), b
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
