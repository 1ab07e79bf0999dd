//go:build linux

package service

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/headbuf"
	"github.com/corral-sandbox/corral/provider"
)

// An export is a zstd-compressed tar (RFC 8878; POSIX pax) holding, in
// order: corral-service.json (exportManifest), policy.yaml, then the
// home's files under home/. Ownership is not kept: an import gives every
// file to the new session's agent.
const (
	manifestName = "corral-service.json"
	policyName   = "policy.yaml"
	homePrefix   = "home/"
	// maxManifest bounds what an import reads into memory for the
	// manifest and the policy; maxDecoderMemory the zstd window (an
	// export's is the encoder default, 8 MiB); maxHome the bytes an
	// import writes, maxEntries its files.
	maxManifest      = 1 << 20
	maxDecoderMemory = 256 << 20
	maxHome          = 64 << 30
	maxEntries       = 1 << 20
)

type exportManifest struct {
	Version  int        `json:"version"`
	Name     string     `json:"name"`
	Exported time.Time  `json:"exported"`
	Corral   string     `json:"corral_version"`
	Start    *StartSpec `json:"start,omitempty"`
}

// secretName and secretContent flag files that look like credentials.
var (
	secretName = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)(^|/)(id_[a-z0-9]+|.*\.(pem|key|p12|pfx)|\.env|\.netrc|\.npmrc|\.git-credentials|credentials(\.json)?|.*token.*|.*secret.*|auth[^/]*\.json)$`)
	})
	secretContent = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)"?(token|secret|password|passwd|api[_-]?key|private[_-]?key|bearer)"?\s*[:=]`)
	})
	cacheDir = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|/)\.?cache(/|$)`) })
)

// secretScan is the size up to which a file's content is searched for
// secrets (configuration files; not bundles, databases or caches).
const secretScan = 64 << 10

// Export writes session name's home, policy and start settings to w as
// an export, and returns the paths (inside the export) of files that look
// like secrets — the caller must say so: an export carries the agent's
// credentials. The session must be stopped, so the state is consistent.
func Export(name string, w io.Writer, version string) (secrets []string, err error) {
	p, rec, unlock, err := openLocked(name, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if st, err := ReadStatus(p); err == nil && st.Live() {
		return nil, &provider.Error{Code: provider.CodeStale, Msg: fmt.Sprintf("service %s is running: stop it first, so the export is consistent (corral service stop %s)", name, name)}
	}
	zw, err := zstd.NewWriter(w)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	now := time.Now().UTC()
	man, _ := json.MarshalIndent(exportManifest{Version: 1, Name: name, Exported: now, Corral: version, Start: rec.Start}, "", "  ")
	pol, err := os.ReadFile(p.Policy())
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{manifestName, man}, {policyName, pol}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: now, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	err = filepath.WalkDir(rec.Home, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rec.Home, full)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(full); err != nil {
				return err
			}
		case fi.Mode().IsDir(), fi.Mode().IsRegular():
		default:
			return nil // sockets, fifos, devices: not state
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Format = homePrefix+filepath.ToSlash(rel), 0, 0, "", "", tar.FormatPAX
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(full)
		if err != nil {
			return err
		}
		defer f.Close()
		head := headbuf.New(secretScan)
		if _, err := io.Copy(tw, io.TeeReader(f, head)); err != nil {
			return err
		}
		// Config files are small; caches are not where secrets are kept.
		if !cacheDir().MatchString(rel) && (secretName().MatchString(rel) || (fi.Size() <= secretScan && secretContent().Match(head.Bytes()))) {
			secrets = append(secrets, h.Name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", rec.Home, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	rec.Exported = now
	return secrets, rec.Save()
}

// Import provisions session name (the export's own name when empty) from
// an export read from r: the policy it carries, its start settings, and
// its home, whose files are given to the new agent. Paths are extracted
// through os.Root, so no entry (.., absolute, through a symlink) lands
// outside the home. A failure undoes the provision.
func Import(ctx context.Context, name string, r io.Reader) (*Record, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(maxDecoderMemory))
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var man exportManifest
	var pol []byte
	for _, want := range []string{manifestName, policyName} {
		h, err := tr.Next()
		if err != nil || h.Name != want {
			return nil, fmt.Errorf("import: not a corral service export (want %s, got %v)", want, entryName(h, err))
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxManifest))
		if err != nil {
			return nil, fmt.Errorf("import: %s: %w", want, err)
		}
		if want == manifestName {
			if err := json.Unmarshal(b, &man); err != nil {
				return nil, fmt.Errorf("import: %s: %w", want, err)
			}
			if man.Version != 1 {
				return nil, fmt.Errorf("import: export version %d: this corral reads version 1", man.Version)
			}
		} else {
			pol = b
		}
	}
	if name == "" {
		name = man.Name
	}
	if man.Start != nil {
		if err := man.Start.Validate(); err != nil {
			return nil, fmt.Errorf("import: the export's %w", err)
		}
	}
	tmp, err := os.CreateTemp("", "corral-import-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(pol); err != nil {
		return nil, err
	}
	tmp.Close()
	rec, err := Provision(ctx, ProvisionOptions{Name: name, PolicyFile: tmp.Name(), HomeFrom: func(home string, uid, gid int) error {
		return extractHome(tr, home, uid, gid)
	}})
	if err != nil {
		return nil, err
	}
	if man.Start != nil {
		rec.Start = man.Start
		if err := rec.Save(); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

func entryName(h *tar.Header, err error) string {
	if err != nil {
		return err.Error()
	}
	return h.Name
}

// extractHome writes the home/ entries of tr into home, owned by uid:gid.
func extractHome(tr *tar.Reader, home string, uid, gid int) error {
	root, err := os.OpenRoot(home)
	if err != nil {
		return err
	}
	defer root.Close()
	// mkdirs makes each missing directory of rel, owned by the agent.
	mkdirs := func(rel string) error {
		cur := ""
		for _, part := range strings.Split(rel, "/") {
			cur = path.Join(cur, part)
			err := root.Mkdir(cur, 0o700)
			switch {
			case err == nil:
				if err := root.Lchown(cur, uid, gid); err != nil && os.Getuid() == 0 {
					return err
				}
			case !errors.Is(err, fs.ErrExist):
				return err
			}
		}
		return nil
	}
	// Never past the file system's free space, less 1 GiB for the rest of
	// the host.
	budget := int64(maxHome)
	var fsst unix.Statfs_t
	if unix.Statfs(home, &fsst) == nil {
		budget = min(budget, int64(fsst.Bavail)*int64(fsst.Bsize)-1<<30)
	}
	for n := 0; ; n++ {
		if n > maxEntries {
			return fmt.Errorf("import: more than %d entries", maxEntries)
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		rel, ok := strings.CutPrefix(h.Name, homePrefix)
		rel = strings.TrimSuffix(path.Clean("/"+rel), "/")
		rel = strings.TrimPrefix(rel, "/")
		if !ok || rel == "" {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm() &^ 0o022 // never group- or world-writable
		switch h.Typeflag {
		case tar.TypeDir:
			if err := mkdirs(rel); err != nil {
				return fmt.Errorf("import %s: %w", h.Name, err)
			}
			_ = root.Chmod(rel, mode|0o700)
		case tar.TypeReg:
			if err := mkdirs(path.Dir(rel)); err != nil {
				return fmt.Errorf("import %s: %w", h.Name, err)
			}
			f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return fmt.Errorf("import %s: %w", h.Name, err)
			}
			var k int64
			k, err = io.CopyN(f, tr, budget+1)
			if budget -= k; budget < 0 {
				err = fmt.Errorf("the home is larger than %d MiB, the most this import may write (64 GiB, and the free space less 1 GiB)", (budget+k)>>20)
			} else if errors.Is(err, io.EOF) {
				err = nil
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("import %s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			if err := mkdirs(path.Dir(rel)); err != nil {
				return fmt.Errorf("import %s: %w", h.Name, err)
			}
			if err := root.Symlink(h.Linkname, rel); err != nil {
				return fmt.Errorf("import %s: %w", h.Name, err)
			}
		default:
			continue
		}
		if err := root.Lchown(rel, uid, gid); err != nil && os.Getuid() == 0 {
			return fmt.Errorf("import %s: %w", h.Name, err)
		}
	}
}
