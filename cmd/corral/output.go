package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// outputFormat is the value of -o/--output, which every command that
// prints data takes: "text" for people, "json" or "yaml" for programs.
// The yaml is the json re-encoded (same field names, same order), so a
// program may read either.
type outputFormat string

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "format" }
func (f *outputFormat) Set(s string) error {
	switch s {
	case "text", "json", "yaml":
		*f = outputFormat(s)
		return nil
	}
	hint := ""
	if strings.ContainsAny(s, "/.") {
		hint = " (-o is the output format; a command that writes a file takes --out FILE)"
	}
	return fmt.Errorf("unknown output format %q: use text, json or yaml%s", s, hint)
}

// noDataAnnotation marks a command that prints no data, so takes no -o
// (cobra.Command.Annotations; its value says what it prints instead).
const noDataAnnotation = "corral/no-data"

// outputFlag adds -o/--output (default text) to c's flags, or to its
// persistent flags when persistent (a command group's subcommands).
func outputFlag(c *cobra.Command, f *outputFormat, persistent ...bool) {
	*f = "text"
	fs := c.Flags()
	if len(persistent) > 0 && persistent[0] {
		fs = c.PersistentFlags()
	}
	fs.VarP(f, "output", "o", "output format: text, json or yaml")
}

// data reports whether f is a format for programs (json or yaml).
func (f outputFormat) data() bool { return f == "json" || f == "yaml" }

// write prints v to w as indented JSON, or as YAML when f is yaml.
func (f outputFormat) write(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return f.writeJSON(w, b)
}

// writeJSON prints the JSON document b to w as it is, or as YAML when f
// is yaml. A stream of documents (watch) gets one "---" before each YAML
// document, so that it is a valid YAML stream.
func (f outputFormat) writeJSON(w io.Writer, b []byte) error {
	if f != "yaml" {
		_, err := fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var n yaml.Node // JSON is YAML: the node keeps the keys' order
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	blockStyle(&n)
	if _, err := io.WriteString(w, "---\n"); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle clears the flow and quoting styles JSON's syntax gave n,
// so the encoder writes block YAML and quotes only what needs it.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// writeJSON prints v to standard output as indented JSON.
func writeJSON(v any) error { return writeJSONTo(os.Stdout, v) }

// writeJSONTo writes v to w as indented JSON.
func writeJSONTo(w io.Writer, v any) error { return outputFormat("json").write(w, v) }
