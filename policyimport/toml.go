package policyimport

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"go.yaml.in/yaml/v3"
)

// parseTOML parses a TOML document (TOML 1.0, go-toml's parser) into the
// importers' tree: a table is a mapping, an array a sequence, a value a
// scalar, each with the line of its key (array elements: their own).
// toml.Unmarshal checks the document first, so a duplicate key or a
// redefined table is an error with its line and column.
func parseTOML(file string, data []byte) (*yaml.Node, error) {
	var check map[string]any
	if err := toml.Unmarshal(data, &check); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("%s:%d:%d: %s", file, row, col, de.Error())
		}
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Line: 1}
	cur := root
	var p unstable.Parser
	p.Reset(data)
	lineOf := func(n *unstable.Node) int { // keys and scalars have their Raw range
		if n == nil || n.Raw.Length == 0 {
			return 0
		}
		return p.Shape(n.Raw).Start.Line
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			keys, ln := keyPath(e.Key(), lineOf)
			parent := root
			for i, k := range keys {
				last := i == len(keys)-1
				if last && e.Kind == unstable.ArrayTable {
					seq := child(parent, k, yaml.SequenceNode, ln)
					elem := &yaml.Node{Kind: yaml.MappingNode, Line: ln}
					seq.Content = append(seq.Content, elem)
					parent = elem
					continue
				}
				parent = descend(parent, k, ln)
			}
			cur = parent
		case unstable.KeyValue:
			setKeyValue(cur, e, lineOf)
		}
	}
	if err := p.Error(); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	return root, nil
}

// keyPath is a (dotted) key's parts and the line of its first part.
func keyPath(it unstable.Iterator, lineOf func(*unstable.Node) int) ([]string, int) {
	var keys []string
	ln := 0
	for it.Next() {
		n := it.Node()
		if ln == 0 {
			ln = lineOf(n)
		}
		keys = append(keys, string(n.Data))
	}
	return keys, ln
}

// descend is the mapping at key k of m, made if missing; for a key that
// holds an array of tables, its last element (TOML: a [a.b] after [[a]]
// extends the last a).
func descend(m *yaml.Node, k string, ln int) *yaml.Node {
	if v := get(m, k); v != nil {
		if v.Kind == yaml.SequenceNode && len(v.Content) > 0 {
			return v.Content[len(v.Content)-1]
		}
		return v
	}
	return child(m, k, yaml.MappingNode, ln)
}

// child is the value at key k of mapping m, made of kind when missing.
func child(m *yaml.Node, k string, kind yaml.Kind, ln int) *yaml.Node {
	if v := get(m, k); v != nil {
		return v
	}
	v := &yaml.Node{Kind: kind, Line: ln}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k, Line: ln}, v)
	return v
}

func setKeyValue(m *yaml.Node, e *unstable.Node, lineOf func(*unstable.Node) int) {
	keys, ln := keyPath(e.Key(), lineOf)
	if len(keys) == 0 {
		return
	}
	for _, k := range keys[:len(keys)-1] {
		m = descend(m, k, ln)
	}
	k := keys[len(keys)-1]
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k, Line: ln}, tomlValue(e.Value(), ln, lineOf))
}

// tomlValue converts a value node; ln is its key's line.
func tomlValue(v *unstable.Node, ln int, lineOf func(*unstable.Node) int) *yaml.Node {
	if l := lineOf(v); l > 0 {
		ln = l
	}
	switch v.Kind {
	case unstable.Array:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Line: ln}
		it := v.Children()
		for it.Next() {
			seq.Content = append(seq.Content, tomlValue(it.Node(), ln, lineOf))
		}
		return seq
	case unstable.InlineTable:
		m := &yaml.Node{Kind: yaml.MappingNode, Line: ln}
		it := v.Children()
		for it.Next() {
			setKeyValue(m, it.Node(), lineOf)
		}
		return m
	case unstable.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: string(v.Data), Line: ln}
	case unstable.Integer:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strings.ReplaceAll(string(v.Data), "_", ""), Line: ln}
	case unstable.Float:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strings.ReplaceAll(string(v.Data), "_", ""), Line: ln}
	default: // strings and dates
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(v.Data), Line: ln}
	}
}
