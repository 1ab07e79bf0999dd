package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema files shipped under shared/reference/mxc.
const (
	schema08 = "0.8.0-alpha"
	schema09 = "0.9.0-dev"
)

func decodeDoc(data []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// pickSchema chooses the schema file for the document's "version": 0.8.x
// (and the older 0.6.x, 0.7.x, which also forbid the directional network
// fields) → 0.8.0-alpha; 0.9.x or no version (MXC's current line) →
// 0.9.0-dev. Anything outside the 0.6–0.9 window is refused.
func pickSchema(v any) (file string, preDirectional bool, err error) {
	if v == nil {
		return schema09, false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, fmt.Errorf("version must be a string, not %T", v)
	}
	m := semver.FindStringSubmatch(s)
	if m == nil {
		return "", false, fmt.Errorf("version %q is not a semantic version", s)
	}
	minor, _ := strconv.Atoi(m[2])
	if m[1] != "0" || minor < 6 || minor > 9 {
		return "", false, fmt.Errorf("version %q is outside the accepted window 0.6–0.9", s)
	}
	switch minor {
	case 9:
		return schema09, false, nil
	case 8:
		return schema08, false, nil
	}
	return schema08, true, nil
}

// schemaDir finds the directory of the shipped schemas.
func schemaDir() (string, error) {
	if d := os.Getenv("WXC_SCHEMA_DIR"); d != "" {
		return d, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for range 10 {
			c := filepath.Join(d, "shared", "reference", "mxc")
			if _, err := os.Stat(filepath.Join(c, "mxc-config.schema."+schema08+".json")); err == nil {
				return c, nil
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return "", errors.New("no schema directory: set WXC_SCHEMA_DIR to shared/reference/mxc")
}

// infraError is a failure of the stand-in itself (schemas unreadable,
// state directory unusable), not of the request.
type infraError struct{ error }

// validate checks doc against the shipped schema file (additionalProperties
// closed, as shipped).
func validate(doc any, file string) error {
	dir, err := schemaDir()
	if err != nil {
		return infraError{err}
	}
	path := filepath.Join(dir, "mxc-config.schema."+file+".json")
	f, err := os.Open(path)
	if err != nil {
		return infraError{fmt.Errorf("MXC schema: %v", err)}
	}
	defer f.Close()
	sdoc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return infraError{fmt.Errorf("MXC schema %s: %v", path, err)}
	}
	c := jsonschema.NewCompiler()
	url := "file:///mxc-config.schema." + file + ".json"
	if err := c.AddResource(url, sdoc); err != nil {
		return infraError{err}
	}
	s, err := c.Compile(url)
	if err != nil {
		return infraError{fmt.Errorf("MXC schema %s: %v", path, err)}
	}
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("configuration does not validate against mxc-config.schema.%s.json: %v", file, err)
	}
	return nil
}

// networkFieldsCheck enforces the contract's version-window rules the
// schema cannot express: a request uses the legacy network fields or the
// directional ones, never both, and the directional ones need 0.8 or later.
func networkFieldsCheck(obj map[string]any, preDirectional bool) error {
	n, _ := obj["network"].(map[string]any)
	if n == nil {
		return nil
	}
	set := func(k string) bool { v, ok := n[k]; return ok && v != nil }
	legacy := set("defaultPolicy") || set("allowLocalNetwork") || set("allowedHosts") || set("blockedHosts")
	directional := set("egress") || set("ingress")
	if directional && preDirectional {
		return fmt.Errorf("network.egress/network.ingress need version 0.8 or later (version %v)", obj["version"])
	}
	if legacy && directional {
		return errors.New("network mixes legacy fields (defaultPolicy, allowLocalNetwork, allowedHosts, blockedHosts) with directional ones (egress, ingress)")
	}
	return nil
}

// checkRequest runs every document-level check. An infraError means the
// stand-in could not check at all.
func checkRequest(obj map[string]any) (schemaFile string, err error) {
	file, pre, err := pickSchema(obj["version"])
	if err != nil {
		return "", err
	}
	if err := validate(obj, file); err != nil {
		return file, err
	}
	return file, networkFieldsCheck(obj, pre)
}
