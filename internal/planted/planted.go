// Package planted finds what a workload left in its read-write trees that
// would make a host tool run code later, outside the sandbox: a repository
// created in a subdirectory (whose config can set core.fsmonitor, filter
// drivers, hooks...), a .git file pointing elsewhere, a protected name
// (.bashrc, .vscode/, .mcp.json, ...) created or changed below the top of a
// tree, where no placeholder or bind could pre-empt it. It runs after the
// workload, on the host, and looks only at entries whose inode change time
// (ctime) is not older than the run: ctime cannot be set by the workload
// (utimensat(2) sets it to now), and creating, writing, renaming or linking
// a file all update it (inode(7)).
package planted

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/policy"
)

// Kinds of Finding.
const (
	KindRepository = "git-repository" // a .git directory created or changed (config, hooks, ...)
	KindGitFile    = "git-file"       // a .git file ("gitdir: ...") created or changed
	KindProtected  = "protected-name" // another protected name created or changed
	KindUnscanned  = "unscanned"      // a part of a tree the scan could not read, or the entry budget ran out
)

// Finding is one planted path.
type Finding struct {
	Path string   `json:"path"` // host path
	Kind string   `json:"kind"`
	Keys []string `json:"keys,omitempty"` // git configuration keys that run commands, "key = value"
	What string   `json:"what"`           // one line for people
	// Created says the path did not exist before the run (its birth
	// time, or for a protected name its change time): only such a path is
	// Disarm's to move aside.
	Created bool   `json:"created,omitempty"`
	root    string // the writable root it was found under
}

// String is the finding as a warning line.
func (f Finding) String() string {
	s := printable(f.Path) + ": " + f.What
	if len(f.Keys) > 0 {
		s += " (" + strings.Join(f.Keys, "; ") + ")"
	}
	return s
}

// Limit bounds the entries examined per scan.
const Limit = 1_000_000

// Scan walks r's writable roots and returns what was created or changed
// since (from Now, taken before the workload started) under a protected
// name (r.ProtectedNames, single components such as ".bashrc") at any
// depth, every .git created or changed, and the parts it could not read.
// Paths that r keeps read-only (a protected name bound at the start) are
// not looked at; symlinks are not followed; placeholders
// (internal/placeholder) are not findings.
func Scan(r *policy.Resolved, since time.Time) []Finding {
	s := &scan{r: r, names: r.ProtectedNames(), since: since, budget: Limit, notWritable: map[string]bool{}, isRoot: map[string]bool{}}
	for _, g := range r.Grants {
		if g.Access != policy.AccessReadWrite {
			s.notWritable[g.Path] = true
		}
	}
	roots := r.WritableRoots()
	for _, root := range roots {
		s.isRoot[root] = true
	}
	for _, root := range roots {
		s.root = root
		s.walk(root) // each on its own: one below a read-only grant is not reached from its parent
	}
	// Protected paths bound at the start that are not there any more: the
	// workload moved one away by renaming its parent (docker binds do not
	// pin parents) and may have put another in its place.
	for _, g := range r.Grants {
		if !strings.HasPrefix(g.Field, "filesystem.protected") || g.Inode == (policy.FileID{}) {
			continue
		}
		s.root = rootOf(roots, g.Path)
		fi, err := os.Lstat(g.Path)
		if err == nil && policy.FileIDOf(fi) == g.Inode {
			continue
		}
		what := "the protected path bound at the start was moved away (its parent renamed)"
		if err == nil {
			what += ", and another put in its place"
		}
		s.add(Finding{Path: g.Path, Kind: KindProtected, What: what, Created: err == nil && s.born(g.Path)})
	}
	// Protected paths nothing could hold (symlinks, absent with their
	// directory), where the workload could make them.
	for _, p := range r.Skipped {
		s.root = rootOf(roots, p)
		if s.root == "" || r.Covering(p).Access != policy.AccessReadWrite && r.Covering(filepath.Dir(p)).Access != policy.AccessReadWrite {
			continue
		}
		if fi, ch := s.changed(p); ch && !slices.ContainsFunc(s.out, func(f Finding) bool { return f.Path == p }) {
			what := "a protected path was created or replaced"
			if fi.Mode()&fs.ModeSymlink != 0 {
				if t, err := os.Readlink(p); err == nil {
					what += ": a symlink to " + printable(t)
				}
			}
			s.add(Finding{Path: p, Kind: KindProtected, What: what, Created: s.born(p)})
		}
	}
	sort.Slice(s.out, func(i, j int) bool { return s.out[i].Path < s.out[j].Path })
	return s.out
}

type scan struct {
	r           *policy.Resolved
	notWritable map[string]bool // grants inside the roots that are read-only or denied
	isRoot      map[string]bool // the writable roots, each walked on its own
	root        string          // the root being walked
	names       map[string]bool
	since       time.Time
	budget      int
	out         []Finding
}

// budgetOut records, once per root, that the entry budget ran out.
func (s *scan) budgetOut() {
	if !slices.ContainsFunc(s.out, func(f Finding) bool { return f.Kind == KindUnscanned && f.Path == s.root && f.root == s.root }) {
		s.add(Finding{Path: s.root, Kind: KindUnscanned, What: fmt.Sprintf("has more than %d entries (all trees together): the rest was not scanned for planted files", Limit)})
	}
}

func (s *scan) add(f Finding) {
	f.root = s.root
	for i := range s.out {
		if o := &s.out[i]; o.Path == f.Path { // one finding per path
			o.What += "; " + f.What
			o.Keys = append(o.Keys, f.Keys...)
			o.Created = o.Created || f.Created
			return
		}
	}
	s.out = append(s.out, f)
}

// rootOf is the innermost of roots that holds p, or "".
func rootOf(roots []string, p string) string {
	best := ""
	for _, r := range roots {
		if policy.Within(p, r) && p != r && len(r) > len(best) {
			best = r
		}
	}
	return best
}

// changed reports whether the entry at p was created or changed during
// the run (and returns its Lstat).
func (s *scan) changed(p string) (fs.FileInfo, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, false
	}
	return fi, !ctime(fi).Before(s.since)
}

func (s *scan) walk(root string) {
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if _, ch := s.changed(p); ch || p == root {
				s.add(Finding{Path: p, Kind: KindUnscanned, What: "could not be scanned for planted files: " + unwrap(err).Error()})
			}
			return nil
		}
		if s.budget--; s.budget < 0 {
			s.budgetOut()
			return fs.SkipAll
		}
		name := d.Name()
		if name == ".git" {
			s.gitReads(filepath.Dir(p)) // also for a read-only .git skipped below
		}
		switch {
		case p == root:
			return nil
		case s.isRoot[p]:
			if d.IsDir() {
				return fs.SkipDir // walked on its own
			}
		case s.notWritable[p] && !s.born(p):
			// A read-only or denied grant, still the directory bound at the
			// start (not one the workload put in its place by renaming
			// its parent, which docker binds allow).
			if d.IsDir() {
				return fs.SkipDir
			}
		case name == ".git":
			s.git(p, d.IsDir())
			if d.IsDir() {
				return fs.SkipDir // objects are data
			}
		case name == "HEAD" && !d.IsDir() && gitShaped(filepath.Dir(p)): // a symlinked HEAD counts (refs.c validate_headref)
			// A bare repository (git init --bare, or any directory with
			// HEAD, objects and refs): git finds it by shape, from any
			// directory below it when core.bare is false.
			s.git(filepath.Dir(p), true)
		case s.names[name]:
			s.protected(p, d)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		s.add(Finding{Path: root, Kind: KindUnscanned, What: "could not be scanned for planted files: " + err.Error()})
	}
}

// gitReads reports, for the repository whose worktree is dir, what git
// reads for it beyond .git (policy.GitReads: included configuration, the
// hooks directories core.hooksPath names) that changed during the run.
func (s *scan) gitReads(dir string) {
	files, hooks := policy.GitReads(dir, s.r.Home)
	var parts []string
	for _, f := range files {
		if _, ch := s.changed(f); ch && !strings.HasPrefix(f, filepath.Join(dir, ".git")+"/") {
			parts = append(parts, "included configuration "+printable(f))
		}
	}
	for _, h := range hooks {
		if fi, ch := s.changed(h); ch || fi != nil && fi.IsDir() && s.anyChanged(h) {
			parts = append(parts, "hooks directory "+printable(h))
		}
	}
	if len(parts) == 0 {
		return
	}
	s.add(Finding{Path: filepath.Join(dir, ".git"), Kind: KindRepository, What: "what git reads for this repository changed: " + strings.Join(parts, ", ")})
}

// gitShaped reports whether dir looks like a git directory to git's
// discovery (setup.c is_git_directory: HEAD, objects/ and refs/).
func gitShaped(dir string) bool {
	for _, part := range []string{"objects", "refs"} {
		if _, err := os.Lstat(filepath.Join(dir, part)); err != nil {
			return false
		}
	}
	return true
}

// gitParts are the files and directories of a .git directory that make
// git run commands or read configuration (gitrepository-layout(5)).
var gitParts = []string{"config", "config.worktree", "hooks", "info", "commondir", "modules", "worktrees"}

// git examines a .git directory or file, or a bare repository.
func (s *scan) git(p string, isDir bool) {
	if !isDir {
		fi, ch := s.changed(p)
		if !ch || policy.IsPlaceholder(p) {
			return
		}
		what := "a .git file was created or changed: git follows it to another repository"
		if fi.Mode().IsRegular() {
			if data, err := s.read(p, 4096); err == nil {
				what += ": " + printable(strings.TrimSpace(string(data)))
			}
		}
		s.add(Finding{Path: p, Kind: KindGitFile, What: what, Created: s.born(p)})
		return
	}
	var parts []string
	// A repository made during the run; for an older one, an entry
	// added to .git (a commit's index.lock, ORIG_HEAD) is no finding,
	// only its parts that run commands.
	made := s.born(p)
	for _, part := range gitParts {
		pp := filepath.Join(p, part)
		fi, ch := s.changed(pp)
		if fi == nil {
			continue
		}
		if fi.IsDir() {
			ch = ch || s.anyChanged(pp)
		}
		if ch {
			parts = append(parts, part)
		}
	}
	if len(parts) == 0 && !made {
		return
	}
	if len(parts) == 0 && policy.IsPlaceholder(p) {
		return
	}
	keys := s.commandKeys(filepath.Join(p, "config"))
	keys = append(keys, s.commandKeys(filepath.Join(p, "config.worktree"))...)
	what := "a repository was changed"
	if made {
		what = "a repository was created"
	}
	if len(parts) > 0 {
		what += "; changed: " + strings.Join(parts, ", ")
	}
	if hooks := s.hooks(filepath.Join(p, "hooks")); len(hooks) > 0 {
		what += "; hooks: " + strings.Join(hooks, ", ")
	}
	s.add(Finding{Path: p, Kind: KindRepository, Keys: keys, What: what, Created: made})
}

// born reports whether p was created during the run: its birth time
// (statx(2) STATX_BTIME) where the filesystem records one, else its
// change time.
func (s *scan) born(p string) bool {
	if t, ok := btime(p); ok {
		return !t.Before(s.since)
	}
	_, ch := s.changed(p)
	return ch
}

// anyChanged reports whether anything below dir changed (bounded by the
// budget).
func (s *scan) anyChanged(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if s.budget--; s.budget < 0 || err != nil {
			found = true // what could not be looked at counts as changed
			return fs.SkipAll
		}
		if _, ch := s.changed(p); ch {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// hooks lists the hooks in dir that git would run (executable, not a
// *.sample), changed during the run.
func (s *scan) hooks(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sample") {
			continue
		}
		fi, ch := s.changed(filepath.Join(dir, e.Name()))
		if ch && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			out = append(out, e.Name())
		}
	}
	return out
}

// protected examines a protected name other than .git.
func (s *scan) protected(p string, d fs.DirEntry) {
	var changed []string
	if _, ch := s.changed(p); ch {
		changed = append(changed, ".")
	}
	if d.IsDir() {
		_ = filepath.WalkDir(p, func(q string, e fs.DirEntry, err error) error {
			if s.budget--; s.budget < 0 {
				changed = append(changed, "(the rest: the entry budget ran out)")
				return fs.SkipAll
			}
			if err != nil {
				changed = append(changed, printable(q)+" (unreadable)")
				return nil
			}
			if q == p {
				return nil
			}
			if _, ch := s.changed(q); ch {
				rel, _ := filepath.Rel(p, q)
				changed = append(changed, rel)
			}
			return nil
		})
	}
	if len(changed) == 0 || (len(changed) == 1 && changed[0] == "." && policy.IsPlaceholder(p)) {
		return
	}
	what := "a protected name was created or changed"
	if inner := slices.DeleteFunc(changed, func(c string) bool { return c == "." }); len(inner) > 0 {
		if len(inner) > 8 {
			inner = append(inner[:8], "...")
		}
		what += "; inside it: " + printable(strings.Join(inner, ", "))
	}
	var keys []string
	if n := d.Name(); n == ".gitconfig" || n == ".gitmodules" {
		keys = s.commandKeys(p)
	}
	s.add(Finding{Path: p, Kind: KindProtected, Keys: keys, What: what, Created: s.born(p)})
}

// commandKeys lists the variables of the git configuration file at p that
// make git run commands (policy.GitCommandKey), as "key = value".
func (s *scan) commandKeys(p string) []string {
	data, err := s.read(p, 1<<20) // configuration is small; a huge one is read in part
	if err != nil {
		return nil
	}
	var out []string
	for _, v := range policy.ParseGitConfig(data) {
		if policy.GitCommandKey(v.Key) {
			out = append(out, printable(v.Key+" = "+v.Value))
		}
	}
	return out
}

// read reads at most limit bytes of the regular file at p, reached from
// the root being walked without following any symlink (a fifo, a device
// or a link planted there is not read: openBeneath).
func (s *scan) read(p string, limit int64) ([]byte, error) {
	f, err := openBeneath(s.root, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// printable makes workload-written text safe for a terminal: control
// characters become \xNN, and it is cut at 200 bytes.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			fmt.Fprintf(&b, `\x%02x`, r)
		} else {
			b.WriteRune(r)
		}
		if b.Len() > 200 {
			b.WriteString("...")
			break
		}
	}
	return b.String()
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Warn writes one warning line per finding to w, and how to act on them.
func Warn(w io.Writer, fs []Finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "corral: warning: planted for later: %s\n", f)
	}
	if len(fs) > 0 {
		fmt.Fprintf(w, "corral: warning: %d path(s) above could make git, a shell, an IDE or an agent run code outside the sandbox: inspect them before you use the tree (--strict-tree makes this fail the run)\n", len(fs))
	}
}

// QuarantineSuffix is appended to a planted path that Disarm moves aside.
const QuarantineSuffix = ".corral-quarantine"

// Disarm moves each planted path the run created aside (PATH ->
// PATH.corral-quarantine, never replacing anything), so that git, a shell
// or an IDE no longer finds it under the name that runs it, and notes
// where it went in What. The rename is made in the path's directory,
// reached from its writable root without following any symlink (a
// concurrent run cannot swap a directory on the way for a link
// elsewhere). It is for after the workload has ended (corral run
// --strict-tree). A path that existed before the run (a repository whose
// hooks changed) is not moved; nor is one that cannot be: the finding
// stays and the error is noted.
func Disarm(fs []Finding) []Finding {
	out := make([]Finding, len(fs))
	for i, f := range fs {
		out[i] = f
		if f.Kind == KindUnscanned || !f.Created {
			continue
		}
		to := filepath.Base(f.Path) + QuarantineSuffix
		if err := renameBeneath(f.root, f.Path, to); err != nil {
			out[i].What += "; could not be moved aside: " + unwrap(err).Error()
		} else {
			out[i].What += "; moved aside to " + printable(filepath.Join(filepath.Dir(f.Path), to))
		}
	}
	return out
}

// Report scans (Scan), disarms when strict (Disarm) and warns on w
// (Warn): what every entry point does after a run.
func Report(w io.Writer, r *policy.Resolved, since time.Time, strict bool) []Finding {
	found := Scan(r, since)
	if strict {
		found = Disarm(found)
	}
	Warn(w, found)
	return found
}
