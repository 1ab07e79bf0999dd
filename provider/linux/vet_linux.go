//go:build linux

package linux

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/corral-sandbox/corral/internal/hostscan"
	"github.com/corral-sandbox/corral/internal/mountinfo"
	"github.com/corral-sandbox/corral/internal/setid"
	"github.com/corral-sandbox/corral/policy"
)

// Read-write trees are vetted on the host before they are granted: a
// mount inside one is not part of the grant, a tree that is a bind of a
// system directory is refused, nested protected names (.git of a nested
// repository) are kept read-only, and in an idmapped tree (a root caller's)
// every set-id or file-capability file is kept read-only: the workload
// owns such a tree's root-owned files, and a write through mmap(2) keeps a
// set-id bit that write(2) would have cleared. A read-write grant of one
// such file (an idmapped file bind) is refused outright, at plan time by
// path and again at mount time on the opened file (vetSetIDFile).

// vetLimit bounds the entries examined per run; beyond it an idmapped tree
// is refused (it cannot be vetted), others get a warning.
const vetLimit = hostscan.Limit

// mountInfo is one line of /proc/self/mountinfo (proc(5)).
type mountInfo = mountinfo.Entry

func readMountInfo() []mountInfo {
	mi, _ := mountinfo.Read("/proc/self/mountinfo")
	return mi
}

// containing returns the mount whose mount point is the longest prefix of
// path (the last one wins when mounts are stacked).
func containing(mounts []mountInfo, path string) (mountInfo, bool) {
	var best mountInfo
	found := false
	for _, m := range mounts {
		if policy.Within(path, m.Point) {
			if !found || len(m.Point) >= len(best.Point) {
				best, found = m, true
			}
		}
	}
	return best, found
}

// bindSource returns where path really lives when the mount holding it is
// a bind of a subtree of the root filesystem ("/etc" for a bind of /etc at
// /srv/x), or "" when that cannot be said.
func bindSource(mounts []mountInfo, path string) string {
	m, ok := containing(mounts, path)
	if !ok || m.Root == "/" {
		return ""
	}
	rootMount, ok := containing(mounts, "/")
	if !ok || rootMount.Dev != m.Dev {
		return "" // another filesystem: its paths are not the host's
	}
	rel := strings.TrimPrefix(path, m.Point)
	return filepath.Join(m.Root, rel)
}

// submounts lists mount points strictly inside path.
func submounts(mounts []mountInfo, path string) []string {
	var out []string
	for _, m := range mounts {
		if m.Point != path && policy.Within(m.Point, path) {
			out = append(out, m.Point)
		}
	}
	return out
}

// vetResult is what vetting the read-write trees found.
type vetResult struct {
	readOnly []MountSpec // nested protected names and set-id files, kept read-only
	errs     []planErr
	warnings []string
}

// vetTree walks one read-write bind. protectedNames are single-component
// protected entries (".git", ".bashrc") matched at every depth below the
// root (the policy protected them directly under it); idmapped says the
// tree is owned by the workload and must also be vetted for set-id files.
func vetTree(m MountSpec, protectedNames map[string]bool, idmapped bool, budget *int, res *vetResult) {
	var setIDCheck func(string, fs.DirEntry)
	if idmapped {
		setIDCheck = func(p string, _ fs.DirEntry) {
			// An error (an unreadable attribute) counts as set-id: the
			// file is only kept read-only.
			if sid, err := setid.Path(p); sid || err != nil {
				res.readOnly = append(res.readOnly, MountSpec{Kind: MountBind, Path: p, Source: p, ReadOnly: true, Field: m.Field + " (set-id or file-capability file kept read-only)"})
			}
		}
	}
	sockets, nested := hostscan.Scan(m.Source, protectedNames, budget, setIDCheck)
	for _, p := range sockets {
		res.readOnly = append(res.readOnly, socketMask(m, p))
	}
	for _, n := range nested {
		res.readOnly = append(res.readOnly, MountSpec{Kind: MountBind, Path: n.Path, Source: n.Path, Dir: n.Dir, ReadOnly: true, Field: m.Field + " (nested " + n.Name + ")"})
	}
}

// socketMask hides the unix socket at p: Landlock before ABI 9 cannot stop
// connect(2) on a socket file, so a socket inside a grant (a service's, or
// another sandbox's) is covered with an empty mode-000 file.
func socketMask(m MountSpec, p string) MountSpec {
	return MountSpec{Kind: MountMask, Path: p, ReadOnly: true, Field: m.Field + " (unix socket hidden)"}
}

// systemTree reports whether p is one of the system directories the
// default policy grants read-only, or inside one.
func systemTree(p string) bool {
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"} {
		if policy.Within(p, d) {
			return true
		}
	}
	return false
}

// vetSockets finds the unix sockets in a read-only tree.
func vetSockets(m MountSpec, budget *int, res *vetResult) {
	for _, p := range hostscan.Sockets(m.Source, budget) {
		res.readOnly = append(res.readOnly, socketMask(m, p))
	}
	if *budget < 0 {
		res.warnings = append(res.warnings, fmt.Sprintf("%s has more than %d entries: unix sockets beyond them were not looked for", m.Source, vetLimit))
	}
}

// vetReadWrite vets every read-write bind of mounts. It reports errors for
// trees that are binds of system directories or, when idmapped, contain
// other mounts or are too large to vet.
func vetReadWrite(mounts []MountSpec, protectedNames map[string]bool, dangerous func(string) bool) vetResult {
	var res vetResult
	mi := readMountInfo()
	budget := vetLimit
	for _, m := range mounts {
		if m.Kind == MountBind && !m.Dir && !m.ReadOnly && m.IDMap {
			sid, err := setid.Path(m.Source)
			if err := vetSetIDFile(m.Source, sid, err); err != nil {
				res.errs = append(res.errs, planErr{m.Field, err.Error()})
			}
			continue
		}
		if m.Kind != MountBind || !m.Dir {
			continue
		}
		if m.ReadOnly {
			// Read-only trees are only searched for unix sockets (a
			// read-only mount does not stop connect(2)); the system
			// directories, which hold none, are not walked.
			if !systemTree(m.Source) {
				vetSockets(m, &budget, &res)
			}
			continue
		}
		if src := bindSource(mi, m.Source); src != "" && dangerous(src) {
			res.errs = append(res.errs, planErr{m.Field, fmt.Sprintf("%s is a bind mount of %s; read-write access would modify the host system", m.Source, src)})
			continue
		}
		if m.IDMap {
			if subs := submounts(mi, m.Source); len(subs) > 0 {
				res.errs = append(res.errs, planErr{m.Field, fmt.Sprintf("%s contains other mounts (%s); an idmapped read-write grant may not span mounts (set process.run_as_user to the tree's owner, or grant the mounts separately)", m.Source, strings.Join(subs, ", "))})
				continue
			}
		}
		vetTree(m, protectedNames, m.IDMap, &budget, &res)
		if budget < 0 {
			msg := fmt.Sprintf("%s has more than %d entries: nested protected paths and set-id files beyond them were not looked for", m.Source, vetLimit)
			if m.IDMap {
				res.errs = append(res.errs, planErr{m.Field, msg + "; an idmapped tree must be vetted in full (set process.run_as_user to the tree's owner, or grant a narrower directory)"})
			} else {
				res.warnings = append(res.warnings, msg)
			}
			return res
		}
	}
	return res
}

// vetSetIDFile is the error refusing an idmapped read-write bind of the
// file name when sid says it is a set-id or file-capability file, or err
// says that could not be told (fail closed); nil otherwise. sid and err
// are setid.Path's at plan time and setid.FD's of the detached mount at
// mount time (preClones), so a path swapped in between does not matter.
// Idmapped, the workload owns the file, so it could write any content
// through mmap(2), which keeps the bits: a set-id or capability binary of
// its choosing on the host. The plan fails rather than binding the file
// read-only, which would silently drop the access the policy asked for;
// the message says what to change.
func vetSetIDFile(name string, sid bool, err error) error {
	if err != nil {
		return fmt.Errorf("%s: cannot tell whether it is a set-id or file-capability file (%v); a read-write grant of such a file of root's is refused", name, err)
	}
	if !sid {
		return nil
	}
	return fmt.Errorf("%s is a set-uid, set-gid or file-capability file of root's; a read-write grant would let the workload, which owns it through the idmapped mount, replace its content and keep the bit (through mmap(2)), leaving a privileged binary of its choosing on the host: grant it read-only, or clear the bits first (chmod ug-s %s; setcap -r %s)", name, name, name)
}
