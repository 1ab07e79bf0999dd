package consent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"go.yaml.in/yaml/v3"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/policy"
)

// StandingEntry is one standing grant: an approval with scope always.
//
//	grants:
//	  - kind: folder
//	    target: /home/me/src/docs
//	    access: ro
//	    approved: 2026-12-01T23:00:00Z
//	    by: uid 1000
type StandingEntry struct {
	Kind     Kind          `yaml:"kind" json:"kind"`
	Target   string        `yaml:"target" json:"target"`           // a canonical folder, or "host:port"
	Access   policy.Access `yaml:"access,omitempty" json:"access"` // folders: ro (the default) or rw
	Approved time.Time     `yaml:"approved,omitempty" json:"approved"`
	By       string        `yaml:"by,omitempty" json:"by"`
}

// standingFile is the file's shape.
type standingFile struct {
	Grants []StandingEntry `yaml:"grants"`
}

// Standing is the standing grants file (consent.persist): "always"
// decisions, kept outside the sandbox, each re-validated against the
// policy's ceiling when read (one outside it is ignored, and said so).
// Its methods are safe for concurrent use; a nil *Standing has no grants.
type Standing struct {
	Path string

	pol     *policy.Resolved
	mu      sync.Mutex
	entries []StandingEntry // the valid ones
	ignored []string        // why the others were ignored
}

// OpenStanding reads the standing grants file of r's consent section
// (ResolvedConsent.Persist): nil when there is none (no consent section,
// or no persist path: no "always" scope). warn is the line the caller
// prints when the file holds grants ("corral: consent: 2 standing grants
// from FILE, 1 ignored: folder /x (ro): ... (consent.folders.ask)"), "" when it
// holds none. The error is LoadStanding's.
func OpenStanding(r *policy.Resolved) (s *Standing, warn string, err error) {
	if r == nil || r.Consent == nil || r.Consent.Persist == "" {
		return nil, "", nil
	}
	s, err = LoadStanding(r.Consent.Persist, r)
	if err != nil {
		return nil, "", err
	}
	return s, s.Summary(), nil
}

// LoadStanding reads the standing grants file at path and checks every
// entry against r's ceiling (policy.Resolved.AskFolder, AskHost). A
// missing file has no grants. Refused, with an error naming the file
// (checkStandingFile): a symlink, anything but a regular file, a file
// another user owns or that group or others may write, one in a
// directory another user controls (internal/trust, on Linux) — the
// workload, or another user, could plant standing grants there. A file
// that is not YAML of the shape {grants: [{kind, target, access,
// approved, by}]} (unknown keys too) is an error with its line and
// column (decodeStanding); one larger than MaxStandingSize is refused.
// Entries are checked, not refused: a folder that is gone, or one the
// ceiling no longer allows, is ignored and said so (Ignored, Summary).
func LoadStanding(path string, r *policy.Resolved) (*Standing, error) {
	s := &Standing{Path: path, pol: r}
	data, err := readStanding(path)
	if err != nil {
		return nil, err
	}
	valid, ignored, err := parseStanding(path, data, r)
	if err != nil {
		return nil, err
	}
	s.entries, s.ignored = valid, ignored
	return s, nil
}

// MaxStandingSize is the largest standing grants file read (1 MiB).
const MaxStandingSize = 1 << 20

// readStanding is the file's content, nil when it does not exist, after
// checkStandingFile accepts it (on the open file: no race with a swap).
func readStanding(path string) ([]byte, error) {
	f, err := openStanding(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("standing grants file %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("standing grants file %s: %w", path, err)
	}
	if err := checkStandingFile(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxStandingSize+1))
	if err != nil {
		return nil, fmt.Errorf("standing grants file %s: %w", path, err)
	}
	if len(data) > MaxStandingSize {
		return nil, fmt.Errorf("standing grants file %s is larger than 1 MiB: refused (it holds one short entry per approval; look at what else is in it)", path)
	}
	return data, nil
}

// parseStanding decodes data and sorts its entries into those within the
// ceiling and why the others are not.
func parseStanding(path string, data []byte, r *policy.Resolved) (valid []StandingEntry, ignored []string, err error) {
	_, _, es, err := decodeStanding(path, data)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range es {
		if why := checkStandingEntry(e, r); why != "" {
			ignored = append(ignored, why)
			continue
		}
		valid = append(valid, e)
	}
	return valid, ignored, nil
}

// standingKeys are the keys of one entry.
var standingKeys = []string{"kind", "target", "access", "approved", "by"}

// yamlLine is the line yaml.v3 puts in a syntax error ("yaml: line 3:
// did not find expected key").
var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): `) })

// decodeStanding parses data (yaml.v3) into its node tree doc, the grants
// sequence in it (nil when there is none; a null "grants:" becomes an
// empty sequence) and its entries in order, a folder's access ro when
// not written. A syntax error names the file and line ("FILE:3: did not
// find expected key"), anything but {grants: [{kind, target, access,
// approved, by}]} the file, line and column of the node at fault
// ("FILE:4:7: unknown key \"taget\" ...": unknown keys, aliases, a value
// of the wrong type).
func decodeStanding(path string, data []byte) (doc, seq *yaml.Node, es []StandingEntry, err error) {
	doc = &yaml.Node{}
	if len(bytes.TrimSpace(data)) == 0 {
		return doc, nil, nil, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err = dec.Decode(doc)
	if err == nil {
		if more := (&yaml.Node{}); dec.Decode(more) != io.EOF {
			return nil, nil, nil, fmt.Errorf("standing grants file %s:%d: a second YAML document: refused (Add would drop it; keep one document)", path, more.Line)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		if m := yamlLine().FindStringSubmatch(msg); m != nil {
			return nil, nil, nil, fmt.Errorf("standing grants file %s:%s: %s (not YAML)", path, m[1], msg[len(m[0]):])
		}
		return nil, nil, nil, fmt.Errorf("standing grants file %s: %w", path, err)
	}
	bad := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("standing grants file %s:%d:%d: %s (want grants: [{kind, target, access, approved, by}])", path, n.Line, n.Column, fmt.Sprintf(format, args...))
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 { // comments only
		return doc, nil, nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return doc, nil, nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, nil, bad(root, "the top is not a mapping")
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case k.Value != "grants" || k.Kind != yaml.ScalarNode:
			return nil, nil, nil, bad(k, "unknown key %q", k.Value)
		case seq != nil:
			return nil, nil, nil, bad(k, "grants twice")
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			*v = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", LineComment: v.LineComment, Line: v.Line, Column: v.Column}
		case v.Kind != yaml.SequenceNode:
			return nil, nil, nil, bad(v, "grants is not a list")
		}
		seq = v
	}
	if seq == nil {
		return doc, nil, nil, nil
	}
	for _, n := range seq.Content {
		if n.Kind != yaml.MappingNode {
			return nil, nil, nil, bad(n, "a grant is not a mapping")
		}
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			if k.Kind != yaml.ScalarNode || !slices.Contains(standingKeys, k.Value) {
				return nil, nil, nil, bad(k, "unknown key %q in a grant", k.Value)
			}
			if v.Kind != yaml.ScalarNode {
				return nil, nil, nil, bad(v, "%s is not a single value", k.Value)
			}
		}
		var e StandingEntry
		if err := n.Decode(&e); err != nil {
			msg := err.Error()
			var te *yaml.TypeError
			if errors.As(err, &te) {
				msg = strings.Join(te.Errors, "; ")
			}
			return nil, nil, nil, bad(n, "%s", msg)
		}
		if e.Kind == KindFolder && e.Access == "" {
			e.Access = policy.AccessReadOnly
		}
		es = append(es, e)
	}
	return doc, seq, es, nil
}

// checkStandingEntry says why e is not a grant the ceiling allows, or "".
func checkStandingEntry(e StandingEntry, r *policy.Resolved) string {
	name := string(e.Kind) + " " + e.Target
	if e.Access != "" {
		name += " (" + string(e.Access) + ")"
	}
	var refusal *policy.ConsentRefusal
	switch {
	case r == nil:
		refusal = &policy.ConsentRefusal{Field: "consent", Reason: "no policy"}
	case e.Kind == KindFolder:
		if filepath.IsAbs(e.Target) && filepath.Clean(e.Target) == e.Target {
			if _, err := os.Lstat(e.Target); errors.Is(err, fs.ErrNotExist) {
				return name + ": gone (no such folder now; the entry is kept in the file)"
			}
		}
		_, refusal = r.AskFolder(e.Target, e.Access)
	case e.Kind == KindHost:
		h, ps, err := net.SplitHostPort(e.Target)
		port, perr := strconv.Atoi(ps)
		if err != nil || perr != nil || e.Access != "" {
			return name + `: not "host:port" without access`
		}
		_, refusal = r.AskHost(h, port)
	default:
		return name + ": kind " + strconv.Quote(string(e.Kind)) + " is not folder or host"
	}
	if refusal != nil {
		return name + ": " + refusal.Error()
	}
	return ""
}

// Summary is the line to print about the file ("" when it holds no
// grant): "corral: consent: N standing grants from FILE" and, when some
// were ignored, ", M ignored: WHY; WHY".
func (s *Standing) Summary() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.entries) + len(s.ignored)
	if n == 0 {
		return ""
	}
	plural := "s"
	if n == 1 {
		plural = ""
	}
	out := fmt.Sprintf("corral: consent: %d standing grant%s from %s", n, plural, s.Path)
	if len(s.ignored) > 0 {
		out += fmt.Sprintf(", %d ignored: %s", len(s.ignored), strings.Join(s.ignored, "; "))
	}
	return out
}

// Entries are the valid standing grants.
func (s *Standing) Entries() []StandingEntry {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]StandingEntry(nil), s.entries...)
}

// Ignored are why the entries outside the ceiling were ignored.
func (s *Standing) Ignored() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ignored...)
}

// Covers reports whether a valid standing grant allows kind k's target
// with access: the same kind and canonical target, and access ro covered
// by ro or rw, rw only by rw.
func (s *Standing) Covers(k Kind, target string, access policy.Access) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.Kind == k && e.Target == target && accessCovers(e.Access, access) {
			return true
		}
	}
	return false
}

// accessCovers says whether a grant with access has covers a request
// for want: the same access, or rw for ro.
func accessCovers(has, want policy.Access) bool {
	return has == want || has == policy.AccessReadWrite && want == policy.AccessReadOnly
}

// standingHeader opens a file Add creates.
const standingHeader = "Corral's standing consent grants (consent.persist): approvals with scope always.\n" +
	"Written by corral (approvals --always); each entry is checked against the policy's consent ceiling at every start."

// Add writes one standing grant (kind k, target, access; by and at for
// the record) into the file and returns what changed as a unified diff
// ("" and no write when an entry valid now covers it already: the same
// access, or rw for ro). The YAML is edited as a
// node tree (yaml.v3), so comments and the other entries are kept; the
// file is replaced atomically (internal/atomicfile, mode 0600; its
// directory made 0700 when missing), then read back and checked again:
// an entry that does not come back valid is an error (the file is left
// as written). A file LoadStanding refuses is not written.
func (s *Standing) Add(k Kind, target string, access policy.Access, by string, at time.Time) (string, error) {
	if s == nil {
		return "", errors.New("no standing grants file")
	}
	if k == KindFolder && access == "" {
		access = policy.AccessReadOnly
	}
	e := StandingEntry{Kind: k, Target: target, Access: access, Approved: at.UTC().Truncate(time.Second), By: by}
	if why := checkStandingEntry(e, s.pol); why != "" {
		return "", fmt.Errorf("not a standing grant the policy allows: %s", why)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := readStanding(s.Path)
	if err != nil {
		return "", err
	}
	doc, seq, es, err := standingNodes(s.Path, old)
	if err != nil {
		return "", err
	}
	for _, x := range es { // covered by an entry valid now: nothing to write
		if x.Kind == k && x.Target == target && accessCovers(x.Access, access) && checkStandingEntry(x, s.pol) == "" {
			return "", nil
		}
	}
	seq.Content = append(seq.Content, entryNode(e))
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	if err := mkdirStanding(filepath.Dir(s.Path)); err != nil {
		return "", fmt.Errorf("standing grants file %s: %w", s.Path, err)
	}
	if err := atomicfile.Write(s.Path, buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("standing grants file %s: %w", s.Path, err)
	}
	back, err := readStanding(s.Path)
	if err != nil {
		return "", err
	}
	valid, ignored, err := parseStanding(s.Path, back, s.pol)
	if err != nil {
		return "", fmt.Errorf("written, but it does not read back: %w", err)
	}
	s.entries, s.ignored = valid, ignored
	found := false
	for _, x := range valid {
		found = found || x.Kind == k && x.Target == target && x.Access == access
	}
	if !found {
		return "", fmt.Errorf("standing grants file %s: written, but the new grant does not read back valid", s.Path)
	}
	from := s.Path
	if old == nil {
		from = "/dev/null"
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: diffLines(string(old)), B: diffLines(buf.String()),
		FromFile: from, ToFile: s.Path, Context: 3})
}

// diffLines is s's lines, each ending in "\n" (difflib.SplitLines adds
// an empty last line to text that ends in one).
func diffLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] += "\n"
	}
	return lines
}

// standingNodes is decodeStanding's tree made ready for one more entry:
// a new file gets standingHeader and a top mapping, a file without
// grants a grants sequence (a flow [] becomes a block list).
func standingNodes(path string, data []byte) (doc, seq *yaml.Node, es []StandingEntry, err error) {
	doc, seq, es, err = decodeStanding(path, data)
	if err != nil {
		return nil, nil, nil, err
	}
	if doc.Kind == 0 { // empty (or comments only)
		doc.Kind = yaml.DocumentNode
		doc.HeadComment = standingHeader
	}
	if len(doc.Content) == 0 {
		doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
	}
	if root := doc.Content[0]; root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		*root = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", HeadComment: root.HeadComment}
	}
	root := doc.Content[0]
	if seq == nil {
		seq = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "grants"}, seq)
	}
	if seq.Style&yaml.FlowStyle != 0 && seq.LineComment != "" { // "grants: [] # c": the comment stays on the key's line
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i]; root.Content[i+1] == seq && k.LineComment == "" {
				k.LineComment, seq.LineComment = seq.LineComment, ""
			}
		}
	}
	seq.Style = 0
	return doc, seq, es, nil
}

// entryNode is e as a YAML mapping (strings tagged, so that the encoder
// quotes what would read back as another type).
func entryNode(e StandingEntry) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	add := func(k, v, tag string) {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v})
	}
	add("kind", string(e.Kind), "!!str")
	add("target", e.Target, "!!str")
	if e.Access != "" {
		add("access", string(e.Access), "!!str")
	}
	add("approved", e.Approved.Format(time.RFC3339), "!!timestamp")
	if e.By != "" {
		add("by", e.By, "!!str")
	}
	return m
}
