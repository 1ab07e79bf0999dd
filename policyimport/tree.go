package policyimport

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// The importers read every source as a yaml.Node tree, which keeps each
// value's line: YAML and JSON (a subset of YAML 1.2) directly, JSON5 and
// TOML converted to it (json5.go, toml.go).

// parseTree parses data (YAML or JSON) into its document's root node.
func parseTree(file string, data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Line: 1}, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d:%d: the top level is not a mapping", file, root.Line, root.Column)
	}
	return root, nil
}

// get is the value of key in mapping n (nil when n is not a mapping or
// has no key).
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// pairs are the keys and values of mapping n, in order.
func pairs(n *yaml.Node) (keys []*yaml.Node, vals []*yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys, vals = append(keys, n.Content[i]), append(vals, n.Content[i+1])
	}
	return keys, vals
}

// items are the elements of sequence n (nil otherwise).
func items(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// str is n's scalar value ("" for none).
func str(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return ""
	}
	return n.Value
}

// boolean is n's boolean value; ok is false when n is not a boolean.
func boolean(n *yaml.Node) (v, ok bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return false, false
	}
	b, err := strconv.ParseBool(n.Value)
	return b, err == nil
}

// line is n's line (0 for nil).
func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// idx is key[i].
func idx(key string, i int) string { return key + "[" + strconv.Itoa(i) + "]" }
