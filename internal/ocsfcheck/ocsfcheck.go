// Package ocsfcheck validates OCSF events against a compiled OCSF schema
// with the rules of the OCSF Server's validator (ocsf/ocsf-server,
// lib/schema/validator2.ex): the class from class_uid; metadata.profiles
// each defined, and attributes that only a profile adds allowed only when
// the event declares that profile; every attribute known to its class or
// object (an object without attributes, such as "unmapped"'s, takes any);
// required attributes present; values of the attribute's type (integer_t
// 32-bit, long_t 64-bit, float_t a JSON number with a fraction or
// exponent, boolean_t, string_t, json_t anything) and of its dictionary
// subtype's range, max_len and values; enum values defined; the
// metadata.version the schema's; type_uid = class_uid*100 + activity_id;
// the at_least_one and just_one constraints of classes and objects. Those
// are errors. Warnings, as in the validator: an enum's sibling caption
// that does not match, a string its type's regex does not match, a
// deprecated class, object or attribute, an event version earlier than
// the schema's (an earlier 0.x or pre-release one is an error). A null
// is a missing value, as in the validator. Not checked: observables
// (Corral writes none).
//
// Schema is the embedded OCSF 1.8.0 (see README.md for its provenance).
package ocsfcheck

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

//go:embed schema-1.8.0.json.zst
var schema180 []byte

// Version is the OCSF version of the embedded schema.
const Version = "1.8.0"

// Problem is one finding: Kind is the validator's name for it (for
// example "attribute_unknown"), Path the attribute path ("a.b[2].c").
type Problem struct {
	Kind, Path, Message string
}

func (p Problem) String() string { return p.Kind + " at " + p.Path + ": " + p.Message }

// Report is what Validate found.
type Report struct {
	Errors, Warnings []Problem
}

// Schema is a compiled OCSF schema.
type Schema struct {
	Version  string                     `json:"version"`
	Classes  map[string]*Item           `json:"classes"`
	Objects  map[string]*Item           `json:"objects"`
	Profiles map[string]json.RawMessage `json:"profiles"`
	Dict     struct {
		Types struct {
			Attributes map[string]*Type `json:"attributes"`
		} `json:"types"`
	} `json:"dictionary"`
	byUID map[int64]*Item
}

// Item is a class or an object.
type Item struct {
	Name        string                `json:"name"`
	UID         *int64                `json:"uid"`
	Attributes  map[string]*Attribute `json:"attributes"`
	Constraints map[string][]string   `json:"constraints"`
	Deprecated  json.RawMessage       `json:"@deprecated"`
}

// Attribute is an attribute of a class or an object.
type Attribute struct {
	Type        string                     `json:"type"`
	ObjectType  string                     `json:"object_type"`
	IsArray     bool                       `json:"is_array"`
	Requirement string                     `json:"requirement"`
	Profiles    []string                   `json:"profiles"`
	Enum        map[string]json.RawMessage `json:"enum"`
	Sibling     string                     `json:"sibling"`
	Deprecated  json.RawMessage            `json:"@deprecated"`
}

// Type is a dictionary type.
type Type struct {
	Type   string            `json:"type"` // the primitive a subtype refines
	Range  []float64         `json:"range"`
	MaxLen *int              `json:"max_len"`
	Regex  string            `json:"regex"`
	Values []json.RawMessage `json:"values"`
	re     *regexp.Regexp
}

var load = sync.OnceValues(func() (*Schema, error) {
	d, err := zstd.NewReader(bytes.NewReader(schema180))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	b, err := io.ReadAll(d)
	if err != nil {
		return nil, err
	}
	return Parse(b)
})

// Load returns the embedded OCSF 1.8.0 schema.
func Load() (*Schema, error) { return load() }

// Parse reads a compiled schema (ocsf-schema-compiler's output).
func Parse(b []byte) (*Schema, error) {
	var s Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("compiled OCSF schema: %w", err)
	}
	s.byUID = map[int64]*Item{}
	for _, c := range s.Classes {
		if c.UID != nil {
			s.byUID[*c.UID] = c
		}
	}
	for name, t := range s.Dict.Types.Attributes {
		if t.Regex != "" {
			re, err := regexp.Compile(t.Regex)
			if err != nil {
				return nil, fmt.Errorf("type %s: regex: %w", name, err)
			}
			t.re = re
		}
	}
	return &s, nil
}

// Validate checks one event (a JSON object).
func (s *Schema) Validate(event []byte) Report {
	v := &validator{s: s}
	dec := json.NewDecoder(bytes.NewReader(event))
	dec.UseNumber()
	var ev map[string]any
	if err := dec.Decode(&ev); err != nil {
		v.err("json_invalid", "", "not a JSON object: %v", err)
		return v.r
	}
	uid, ok := integer(ev["class_uid"], math.MinInt32, math.MaxInt32)
	if !ok {
		v.err("class_uid", "class_uid", "missing or not an integer_t")
		return v.r
	}
	class := s.byUID[uid]
	if class == nil {
		v.err("class_uid_unknown", "class_uid", "no class is defined for %d", uid)
		return v.r
	}
	if class.Deprecated != nil {
		v.warn("class_deprecated", "", "class %s is deprecated", class.Name)
	}
	if md, ok := ev["metadata"].(map[string]any); ok {
		if ps, ok := md["profiles"].([]any); ok {
			for i, p := range ps {
				if name, ok := p.(string); ok {
					if _, known := s.Profiles[name]; !known {
						v.err("profile_unknown", fmt.Sprintf("metadata.profiles[%d]", i), "no profile is defined for %q", name)
					}
					v.profiles = append(v.profiles, name)
				}
			}
		}
		if ver, ok := md["version"].(string); ok {
			v.version(ver, s.Version)
		}
	}
	v.object(ev, "", class)
	act, aok := integer(ev["activity_id"], math.MinInt32, math.MaxInt32)
	tu, tok := integer(ev["type_uid"], math.MinInt64, math.MaxInt64)
	if aok && tok && tu != uid*100+act {
		v.err("type_uid_incorrect", "type_uid", "%d does not match class_uid %d * 100 + activity_id %d", tu, uid, act)
	}
	return v.r
}

type validator struct {
	s        *Schema
	profiles []string
	r        Report
}

func (v *validator) err(kind, path, f string, a ...any) {
	v.r.Errors = append(v.r.Errors, Problem{kind, path, fmt.Sprintf(f, a...)})
}

func (v *validator) warn(kind, path, f string, a ...any) {
	v.r.Warnings = append(v.r.Warnings, Problem{kind, path, fmt.Sprintf(f, a...)})
}

// allowed is whether attribute a applies given the declared profiles: an
// attribute no profile adds always does; one a profile adds only with it.
func (v *validator) allowed(a *Attribute) bool {
	if a.Profiles == nil {
		return true
	}
	for _, p := range a.Profiles {
		for _, d := range v.profiles {
			if p == d {
				return true
			}
		}
	}
	return false
}

func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// object checks m against item (a class or an object) at path.
func (v *validator) object(m map[string]any, path string, item *Item) {
	attrs := map[string]*Attribute{}
	for name, a := range item.Attributes {
		if v.allowed(a) {
			attrs[name] = a
		}
	}
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a, p := attrs[name], join(path, name)
		val, present := m[name]
		if !present || val == nil {
			if a.Requirement == "required" {
				v.err("attribute_required_missing", p, "required attribute %q is missing", name)
			}
			continue
		}
		if a.Deprecated != nil {
			v.warn("attribute_deprecated", p, "attribute %q is deprecated", name)
		}
		if a.IsArray {
			arr, ok := val.([]any)
			if !ok {
				v.err("attribute_wrong_type", p, "not an array of %s", a.Type)
				continue
			}
			for i, e := range arr {
				v.value(e, fmt.Sprintf("%s[%d]", p, i), a)
			}
		} else {
			v.value(val, p, a)
		}
		if a.Enum != nil {
			v.enum(m, path, name, a)
		}
	}
	if len(attrs) > 0 { // none (as "object", unmapped's type, has): any are allowed
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if attrs[k] == nil {
				why := "is not defined in " + item.Name
				if a := item.Attributes[k]; a != nil {
					why = fmt.Sprintf("belongs to profile %s, which metadata.profiles does not declare", strings.Join(a.Profiles, " or "))
				}
				v.err("attribute_unknown", join(path, k), "attribute %q %s", k, why)
			}
		}
	}
	for kind, keys := range item.Constraints {
		n := 0
		for _, k := range keys {
			if _, ok := m[k]; ok {
				n++
			}
		}
		switch {
		case kind == "at_least_one" && n == 0:
			v.err("constraint_failed", path, "%s: at least one of %s expected, got none", item.Name, strings.Join(keys, ", "))
		case kind == "just_one" && n != 1:
			v.err("constraint_failed", path, "%s: exactly one of %s expected, got %d", item.Name, strings.Join(keys, ", "), n)
		case kind != "at_least_one" && kind != "just_one":
			v.err("constraint_unknown", path, "schema bug: unknown constraint %s", kind)
		}
	}
}

// enum checks the enum attribute name of m and its sibling.
func (v *validator) enum(m map[string]any, path, name string, a *Attribute) {
	vals := []any{m[name]}
	if a.IsArray {
		vals, _ = m[name].([]any)
	}
	for i, val := range vals {
		p := join(path, name)
		if a.IsArray {
			p = fmt.Sprintf("%s[%d]", p, i)
		}
		key := fmt.Sprint(val)
		raw, ok := a.Enum[key]
		if !ok {
			v.err("attribute_enum_value_unknown", p, "value %v is not defined for enum %q", val, name)
			continue
		}
		var member struct {
			Caption    string          `json:"caption"`
			Deprecated json.RawMessage `json:"@deprecated"`
		}
		_ = json.Unmarshal(raw, &member)
		if member.Deprecated != nil {
			v.warn("attribute_enum_value_deprecated", p, "enum value %v of %q is deprecated", val, name)
		}
		sib, ok := m[a.Sibling]
		if a.Sibling == "" || !ok {
			continue
		}
		if a.IsArray { // an array's siblings: errors, and any for 99
			arr, _ := sib.([]any)
			switch {
			case key == "99":
			case i >= len(arr):
				v.err("attribute_enum_array_sibling_missing", join(path, a.Sibling), "no sibling for %s", p)
			case arr[i] != member.Caption:
				v.err("attribute_enum_array_sibling_incorrect", fmt.Sprintf("%s[%d]", join(path, a.Sibling), i), "%q is not the caption %q of %s", arr[i], member.Caption, p)
			}
			continue
		}
		switch {
		case key == "99" && sib == member.Caption:
			v.warn("attribute_enum_sibling_suspicious_other", join(path, a.Sibling), "%q is the caption of 99 (Other); the source's own value is expected", sib)
		case key != "99" && sib != member.Caption:
			v.warn("attribute_enum_sibling_incorrect", join(path, a.Sibling), "%q does not match the caption %q of %s %v", sib, member.Caption, name, val)
		}
	}
}

// value checks one (non-array) value of attribute a.
func (v *validator) value(val any, p string, a *Attribute) {
	if a.Type == "object_t" {
		m, ok := val.(map[string]any)
		if !ok {
			v.err("attribute_wrong_type", p, "not a %s object", a.ObjectType)
			return
		}
		obj := v.s.Objects[a.ObjectType]
		if obj == nil {
			v.err("schema_bug_object_missing", p, "object %s is not defined", a.ObjectType)
			return
		}
		if obj.Deprecated != nil {
			v.warn("object_deprecated", p, "object %s is deprecated", a.ObjectType)
		}
		v.object(m, p, obj)
		return
	}
	t := v.s.Dict.Types.Attributes[a.Type]
	if t == nil {
		v.err("schema_bug_type_missing", p, "type %s is not defined", a.Type)
		return
	}
	prim, super := a.Type, (*Type)(nil)
	if t.Type != "" {
		prim, super = t.Type, v.s.Dict.Types.Attributes[t.Type]
	}
	wrong := func() { v.err("attribute_wrong_type", p, "%v is not a %s", val, a.Type) }
	var num float64
	switch prim {
	case "boolean_t":
		if _, ok := val.(bool); !ok {
			wrong()
			return
		}
	case "integer_t", "long_t":
		lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
		if prim == "long_t" {
			lo, hi = math.MinInt64, math.MaxInt64
		}
		n, ok := integer(val, lo, hi)
		if !ok {
			wrong()
			return
		}
		num = float64(n)
	case "float_t":
		n, ok := val.(json.Number)
		if !ok || !strings.ContainsAny(string(n), ".eE") {
			wrong() // Elixir's is_float: 1 is an integer, 1.0 a float
			return
		}
		num, _ = n.Float64()
	case "string_t":
		str, ok := val.(string)
		if !ok {
			wrong()
			return
		}
		if ml := first(t, super, func(t *Type) bool { return t.MaxLen != nil }); ml != nil && utf8.RuneCountInString(str) > *ml.MaxLen {
			v.err("attribute_value_exceeds_max_len", p, "length %d exceeds %s's max length %d", utf8.RuneCountInString(str), a.Type, *ml.MaxLen)
		}
		if rt := first(t, super, func(t *Type) bool { return t.re != nil }); rt != nil && !rt.re.MatchString(str) {
			v.warn("attribute_value_regex_not_matched", p, "%q does not match %s's pattern", str, a.Type)
		}
	case "json_t":
		return
	default:
		v.err("schema_bug_primitive_type_unknown", p, "primitive type %s is unknown", prim)
		return
	}
	if prim != "string_t" && prim != "boolean_t" {
		if rt := first(t, super, func(t *Type) bool { return len(t.Range) == 2 }); rt != nil && (num < rt.Range[0] || num > rt.Range[1]) {
			v.err("attribute_value_exceeds_range", p, "%v is outside %s's range %v to %v", val, a.Type, rt.Range[0], rt.Range[1])
		}
	}
	if vt := first(t, super, func(t *Type) bool { return t.Values != nil }); vt != nil {
		enc, _ := json.Marshal(val)
		in := false
		for _, want := range vt.Values {
			if bytes.Equal(bytes.TrimSpace(want), enc) {
				in = true
			}
		}
		if !in {
			v.err("attribute_value_not_in_type_values", p, "%v is not one of %s's values", val, a.Type)
		}
	}
}

// first is t if has(t), else the supertype if it has: the validator checks
// a subtype's constraint, and its supertype's when the subtype has none.
func first(t, super *Type, has func(*Type) bool) *Type {
	if has(t) {
		return t
	}
	if super != nil && has(super) {
		return super
	}
	return nil
}

// integer is val as an integer within [lo, hi].
func integer(val any, lo, hi int64) (int64, bool) {
	n, ok := val.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil && i >= lo && i <= hi
}

// semver is the OCSF Server's version syntax (lib/schema/utils.ex
// @version_regex): major.minor.patch with an optional pre-release.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-(.+))?$`)

// version checks the event's metadata.version ev against the schema's
// sv as validate_version does: equal passes; later is an error; earlier
// is an error for an initial-development (0.x) or pre-release version,
// which promise no compatibility, and otherwise a warning. A malformed
// version is left to the attribute's type check, as there.
func (v *validator) version(ev, sv string) {
	e, s := semver.FindStringSubmatch(ev), semver.FindStringSubmatch(sv)
	if e == nil || s == nil || ev == sv {
		return
	}
	switch {
	case !earlier(e, s):
		v.err("version_incompatible_later", "metadata.version", "event version %q is later than schema version %q", ev, sv)
	case e[1] == "0":
		v.err("version_incompatible_initial_development", "metadata.version", "event version %q is an initial development version, incompatible with schema version %q", ev, sv)
	case e[4] != "":
		v.err("version_incompatible_prerelease", "metadata.version", "event version %q is a pre-release, incompatible with schema version %q", ev, sv)
	default:
		v.warn("version_earlier", "metadata.version", "event version %q is earlier than schema version %q", ev, sv)
	}
}

// earlier reports whether parsed version a sorts before b (semver's
// precedence: numbers, then a pre-release before its release).
func earlier(a, b []string) bool {
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(a[i])
		y, _ := strconv.Atoi(b[i])
		if x != y {
			return x < y
		}
	}
	return a[4] != "" && (b[4] == "" || a[4] < b[4])
}
