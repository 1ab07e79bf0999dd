package mxc

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// The wxc-exec document (env values, proxy credential) never goes on the
// command line: it goes to a file of the caller's alone (0600; an
// owner-only DACL on Windows) that is removed after the run.
func TestConfigFileKeepsSecretsOffTheCommandLine(t *testing.T) {
	doc := `{"process":{"env":["TOKEN=s3cr3t-value"]}}`
	args, cleanup, err := configFile([]string{"--experimental", "--config-base64", base64.StdEncoding.EncodeToString([]byte(doc)), "--", "true"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(args, " "), "s3cr3t") || slices.Contains(args, "--config-base64") {
		t.Fatalf("args still carry the document: %q", args)
	}
	i := slices.Index(args, "--config")
	if i < 0 || args[len(args)-1] != "true" || args[0] != "--experimental" {
		t.Fatalf("args = %q", args)
	}
	path := args[i+1]
	t.Run("private", func(t *testing.T) { checkPrivate(t, path) })
	if b, _ := os.ReadFile(path); string(b) != doc {
		t.Errorf("config file holds %q", b)
	}
	cleanup()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("config file left behind: %v", err)
	}
}

// The plan as explain prints it masks environment values; the request the
// runner sends is untouched.
func TestDetailsJSONMasksEnv(t *testing.T) {
	d := Details{Backend: BackendProcessContainer, Request: &Request{Process: &Process{Env: []string{"TOKEN=s3cr3t-value"}}}}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "s3cr3t") || !strings.Contains(string(b), "TOKEN=[REDACTED]") {
		t.Errorf("details JSON: %s", b)
	}
	if d.Request.Process.Env[0] != "TOKEN=s3cr3t-value" {
		t.Error("marshalling changed the request")
	}
}
