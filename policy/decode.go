package policy

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// position is a 1-based line and column in the policy file.
type position struct{ line, col int }

// keySuffix marks the position of a mapping key (as opposed to its value)
// in Policy.pos, e.g. "layers.seccomp" + keySuffix.
const keySuffix = "#key"

// decoder is a strict, reflect-based decoder from a yaml.Node tree into the
// policy types. It matches `yaml` struct tags, rejects unknown and duplicate
// keys and type mismatches, and records the position of every value by its
// field path so that later checks can point at it.
type decoder struct {
	file string
	pos  map[string]position
	bad  map[string]bool // field paths that failed to decode
	errs []*Error
}

var (
	pathRuleType = reflect.TypeOf(PathRule{})
	byteSizeType = reflect.TypeOf(ByteSize(0))
	durationType = reflect.TypeOf(Duration(0))
	globsType    = reflect.TypeOf(Globs(nil))
)

func (d *decoder) fail(n *yaml.Node, field, msg, hint string) {
	e := &Error{File: d.file, Field: field, Msg: msg, Hint: hint}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
	d.bad[field] = true
}

func (d *decoder) mark(n *yaml.Node, field string) {
	d.pos[field] = position{n.Line, n.Column}
}

func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// describe names the kind of a node for type errors.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "null"
		}
		return n.ShortTag() + " " + n.Value
	}
	return "an unexpected node"
}

// homeField reports whether field holds a path, where a bare ~ (YAML's
// null) means the home: filesystem.protected and consent.folders entries,
// consent.persist.
func homeField(field string) bool {
	for _, list := range []string{"filesystem.protected[", "consent.folders.ask[", "consent.folders.never["} {
		if strings.HasPrefix(field, list) {
			return true
		}
	}
	return field == "consent.persist"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decode stores n into v (addressable), reporting problems under field.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, field string) {
	d.mark(n, field)
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if isNull(n) {
		if n.Value == "~" && (v.Type() == pathRuleType || homeField(field)) {
			// A bare ~ is YAML's null, but in a path list it means home.
			n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "~", Line: n.Line, Column: n.Column}
		} else {
			v.SetZero()
			return
		}
	}
	switch v.Type() {
	case pathRuleType:
		d.pathRule(n, v.Addr().Interface().(*PathRule), field)
		return
	case byteSizeType:
		if size, msg, hint := parseByteSizeNode(n); msg != "" {
			d.fail(n, field, msg, hint)
		} else {
			v.SetInt(int64(size))
		}
		return
	case globsType:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			v.Set(reflect.ValueOf(Globs{n.Value}))
			return
		}
	case durationType:
		if dur, msg, hint := parseDurationNode(n); msg != "" {
			d.fail(n, field, msg, hint)
		} else {
			v.SetInt(int64(dur))
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structure(n, v, field)
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		d.decode(n, elem.Elem(), field)
		v.Set(elem)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, field, "expected a list, got "+describe(n), "write one entry per line starting with \"- \", or [a, b]")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", field, i))
		}
		v.Set(s)
	case reflect.Map:
		d.mapping(n, v, field)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!bool" {
			d.fail(n, field, "expected a string, got "+describe(n), "write a plain value; quote it if it looks like a number or boolean")
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			d.fail(n, field, "expected an integer, got "+describe(n), "write a whole number without quotes")
			return
		}
		var i int64
		if err := n.Decode(&i); err != nil {
			d.fail(n, field, "integer out of range: "+n.Value, "")
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			d.fail(n, field, "expected a number, got "+describe(n), "write a number without quotes, e.g. 1.5")
			return
		}
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, field, "not a finite number: "+n.Value, "write a number such as 2 or 0.5")
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.fail(n, field, "expected true or false, got "+describe(n), "write true or false without quotes")
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.fail(n, field, "expected true or false, got "+describe(n), "")
			return
		}
		v.SetBool(b)
	default:
		panic("policy: decoder does not handle " + v.Type().String())
	}
}

// structFields maps the yaml tag names of t to field indexes, in order.
func structFields(t reflect.Type) (names []string, index map[string]int) {
	index = map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		names = append(names, name)
		index[name] = i
	}
	return names, index
}

// keys walks the key/value pairs of a mapping node, rejecting non-scalar and
// duplicate keys. fn is called for each acceptable pair.
func (d *decoder) keys(n *yaml.Node, field string, fn func(key, val *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, field, "mapping keys must be plain names, got "+describe(k), "")
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			d.fail(k, field, "YAML merge keys (<<) are not supported", "write the fields out in full")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.fail(k, joinField(field, k.Value), "duplicate key "+strconv.Quote(k.Value), fmt.Sprintf("it is already set on line %d; keep one", line))
			continue
		}
		seen[k.Value] = k.Line
		fn(k, val)
	}
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping, got "+describe(n), "write \"key: value\" lines indented under "+orTop(field))
		return
	}
	names, index := structFields(v.Type())
	d.keys(n, field, func(k, val *yaml.Node) {
		i, ok := index[k.Value]
		sub := joinField(field, k.Value)
		if !ok {
			d.fail(k, sub, "unknown field "+strconv.Quote(k.Value), unknownFieldHint(k.Value, field, names))
			return
		}
		d.mark(k, sub+keySuffix)
		d.decode(val, v.Field(i), sub)
	})
}

func orTop(field string) string {
	if field == "" {
		return "the top level"
	}
	return field
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping, got "+describe(n), "write \"name: value\" lines indented under "+field)
		return
	}
	t := v.Type()
	m := reflect.MakeMapWithSize(t, len(n.Content)/2)
	d.keys(n, field, func(k, val *yaml.Node) {
		sub := joinField(field, k.Value)
		d.mark(k, sub+keySuffix)
		if t.Key() == reflect.TypeOf(Layer("")) && !knownLayer(Layer(k.Value)) {
			names := make([]string, len(AllLayers))
			for i, l := range AllLayers {
				names[i] = string(l)
			}
			hint := "layers are " + strings.Join(names, ", ")
			if s := suggest(k.Value, names); s != "" {
				hint = "did you mean " + strconv.Quote(s) + "? " + hint
			}
			d.fail(k, sub, "unknown layer "+strconv.Quote(k.Value), hint)
			return
		}
		elem := reflect.New(t.Elem()).Elem()
		d.decode(val, elem, sub)
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), elem)
	})
	v.Set(m)
}

func knownLayer(l Layer) bool {
	for _, k := range AllLayers {
		if k == l {
			return true
		}
	}
	return false
}

func (d *decoder) pathRule(n *yaml.Node, r *PathRule, field string) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() != "!!str" {
			d.fail(n, field, "expected a path, got "+describe(n), "write a path such as /usr or ~/project")
			return
		}
		r.Path = n.Value
	case yaml.MappingNode:
		names, index := structFields(pathRuleType)
		var pathNode *yaml.Node
		rv := reflect.ValueOf(r).Elem()
		d.keys(n, field, func(k, val *yaml.Node) {
			i, ok := index[k.Value]
			sub := joinField(field, k.Value)
			if !ok {
				d.fail(k, sub, "unknown field "+strconv.Quote(k.Value), unknownFieldHint(k.Value, field, names))
				return
			}
			if k.Value == "path" {
				pathNode = val
			}
			d.decode(val, rv.Field(i), sub)
		})
		if pathNode == nil {
			d.fail(n, field, "path rule has no \"path\"", "write {path: /some/dir, optional: true}")
			return
		}
		// Point errors about the rule at its path scalar.
		d.mark(pathNode, field)
	default:
		d.fail(n, field, "expected a path or {path, optional}, got "+describe(n), "write a path string, or a mapping {path: P, optional: true}")
	}
}

var byteSizeRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*(?:([KMGTkmgt])(?:i|iB|B)?|B)?$`)
})

// ParseByteSize parses a size: a plain byte count ("512"), or a number with
// a unit K, M, G or T, optionally followed by "i", "iB" or "B" ("256M",
// "256Mi", "256MiB", "1.5G"). All units are binary: K = 1024 bytes,
// M = 1024 K, and so on; "MB" also means 1024*1024. Fractions are rounded
// down to a whole byte. Negative sizes and sizes above 2^63-1 are errors.
func ParseByteSize(s string) (ByteSize, error) {
	m := byteSizeRE().FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	var shift uint
	if m[2] != "" {
		shift = uint(strings.IndexByte("KMGT", strings.ToUpper(m[2])[0])+1) * 10
	} else if !r.IsInt() {
		return 0, fmt.Errorf("size %q has a fraction of a byte", s)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return ByteSize(q.Int64()), nil
}

func parseByteSizeNode(n *yaml.Node) (ByteSize, string, string) {
	const hint = "write a byte count or a size such as 256M or 1.5G (binary units K, M, G, T)"
	if n.Kind != yaml.ScalarNode {
		return 0, "expected a size, got " + describe(n), hint
	}
	switch n.ShortTag() {
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return 0, "size out of range: " + n.Value, hint
		}
		if i < 0 {
			return 0, "size must not be negative", hint
		}
		return ByteSize(i), "", ""
	case "!!str":
		if strings.HasPrefix(strings.TrimSpace(n.Value), "-") {
			return 0, "size must not be negative", hint
		}
		s, err := ParseByteSize(n.Value)
		if err != nil {
			return 0, err.Error(), hint
		}
		return s, "", ""
	}
	return 0, "expected a size, got " + describe(n), hint
}

func parseDurationNode(n *yaml.Node) (Duration, string, string) {
	const hint = "write a duration such as 30s, 5m or 1h30m"
	if n.Kind != yaml.ScalarNode {
		return 0, "expected a duration, got " + describe(n), hint
	}
	switch n.ShortTag() {
	case "!!int":
		if n.Value == "0" {
			return 0, "", ""
		}
		return 0, "a duration needs a unit: " + n.Value, "write " + n.Value + "s for seconds, or another unit (ms, s, m, h)"
	case "!!str":
		d, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			return 0, "invalid duration " + strconv.Quote(n.Value), hint
		}
		if d < 0 {
			return 0, "duration must not be negative", hint
		}
		return Duration(d), "", ""
	}
	return 0, "expected a duration, got " + describe(n), hint
}

// suggest returns the candidate closest to s, or "" when none is close.
// Matching ignores case and treats "-" like "_".
func suggest(s string, candidates []string) string {
	norm := func(x string) string { return strings.ReplaceAll(strings.ToLower(x), "-", "_") }
	ns := norm(s)
	best, bestD := "", math.MaxInt
	for _, c := range candidates {
		dist := levenshtein(ns, norm(c))
		if strings.ReplaceAll(ns, "_", "") == strings.ReplaceAll(norm(c), "_", "") {
			dist = 0
		}
		if dist < bestD {
			best, bestD = c, dist
		}
	}
	limit := max(1, len(s)/3)
	if bestD <= limit {
		return best
	}
	return ""
}

// levenshtein is the optimal-string-alignment edit distance: insertions,
// deletions, substitutions and transpositions of adjacent runes cost 1.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// allFieldPaths lists every field path of the Policy type ("network.mode",
// "process.limits.memory", ...), for hints about misplaced keys.
func allFieldPaths() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		names, index := structFields(t)
		for _, name := range names {
			p := joinField(prefix, name)
			out = append(out, p)
			ft := t.Field(index[name]).Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != pathRuleType {
				walk(ft, p)
			}
		}
	}
	walk(reflect.TypeOf(Policy{}), "")
	return out
}

// unknownFieldHint suggests a close sibling name, or else the place where a
// field of that exact name belongs, or else lists the valid names.
func unknownFieldHint(key, parent string, siblings []string) string {
	if s := suggest(key, siblings); s != "" {
		return "did you mean " + strconv.Quote(s) + "?"
	}
	var elsewhere []string
	for _, p := range allFieldPaths() {
		last := p[strings.LastIndexByte(p, '.')+1:]
		if last == key && p != joinField(parent, key) {
			elsewhere = append(elsewhere, p)
		}
	}
	if len(elsewhere) > 0 {
		return "did you mean " + strings.Join(elsewhere, " or ") + "? it belongs under " + orTop(parentOf(elsewhere[0]))
	}
	return "valid fields of " + orTop(parent) + " are " + strings.Join(siblings, ", ")
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}
