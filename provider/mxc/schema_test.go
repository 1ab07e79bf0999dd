package mxc

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaDir holds the MXC schemas as shipped (additionalProperties closed).
const schemaDir = "../../../shared/reference/mxc"

func loadSchema(t *testing.T, version string) *jsonschema.Schema {
	t.Helper()
	path := filepath.Join(schemaDir, "mxc-config.schema."+version+".json")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("MXC schema (shared reference data): %v", err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	url := "file:///mxc-config.schema." + version + ".json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, req *Request) error {
	t.Helper()
	b, err := req.JSON()
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		return &docError{string(b), err}
	}
	return nil
}

type docError struct {
	doc string
	err error
}

func (e *docError) Error() string { return e.err.Error() + "\ndocument: " + e.doc }

// Every document the table produces, with every schema its backend can
// use, validates against the shipped schema; for isolation_session so does
// each phase's request.
func TestEmittedConfigsValidate(t *testing.T) {
	schemas := map[string]*jsonschema.Schema{Schema08: loadSchema(t, Schema08), Schema09: loadSchema(t, Schema09)}
	n := 0
	for _, c := range mapCases() {
		versions := []string{Schema08, Schema09}
		if c.backend == iso {
			versions = []string{Schema09}
		}
		for _, v := range versions {
			req, _ := Map(c.r(), Config{Backend: c.backend, SchemaVersion: v}, c.proxy)
			if err := validate(t, schemas[v], req); err != nil {
				t.Errorf("%s (%s): %v", c.name, v, err)
			}
			n++
			if c.backend != iso {
				continue
			}
			for _, p := range []Phase{PhaseProvision, PhaseStart, PhaseExec, PhaseStop, PhaseDeprovision} {
				pr, err := req.ForPhase(p, "iso:0123")
				if err != nil {
					t.Fatal(err)
				}
				if err := validate(t, schemas[v], pr); err != nil {
					t.Errorf("%s (%s, %s): %v", c.name, v, p, err)
				}
				n++
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d documents validated", n)
	}
}

// The validator really is closed: an unknown field, a 0.9-only field under
// 0.8, and isolation_session under 0.8 are all refused.
func TestSchemaIsClosed(t *testing.T) {
	s08, s09 := loadSchema(t, Schema08), loadSchema(t, Schema09)
	req, _ := Map(base(), Config{}, "")
	if err := validate(t, s08, req); err != nil {
		t.Fatal(err)
	}
	bad := *req
	bad.Phase = PhaseProvision
	if err := validate(t, s08, &bad); err == nil || !strings.Contains(err.Error(), "phase") {
		t.Errorf("0.8 accepted phase: %v", err)
	}
	if err := validate(t, s09, &bad); err != nil {
		t.Errorf("0.9 refused phase: %v", err)
	}
	bad = *req
	bad.Containment = containmentIsolationSession
	if err := validate(t, s08, &bad); err == nil {
		t.Error("0.8 accepted containment isolation_session")
	}
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"process":{},"filesystem":{"readOnlyPaths":["C:\\x"]}}`))
	if err := s08.Validate(inst); err == nil {
		t.Error("0.8 accepted an unknown filesystem field")
	}
}
