//go:build linux

package service

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testcert"
	"github.com/corral-sandbox/corral/internal/testorigin"
	"github.com/corral-sandbox/corral/provider/linux"
	"github.com/corral-sandbox/corral/qualify"
)

// TestMain lets the test binary be what the corral binary is to a
// service: its supervisor (started detached by Start, with the launcher's
// handoff on stdin, as cmd/corral's serviceSupervisor) and the linux
// sandbox's init.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case linux.InitArg:
			linux.InitMain()
		case linux.HoldArg:
			linux.HoldMain()
		case SupervisorArg:
			os.Exit(Supervise(os.Args[2], os.NewFile(3, "launch"), SupervisorOptions{Version: "test", Environ: ReadHandoff(os.Stdin)}))
		}
	}
	os.Exit(m.Run())
}

// A service's credentials: an env source is read from the environment of
// `service start` (the launcher), handed to the detached supervisor on a
// pipe and held in its memory only (not its argv, environment, record,
// status or logs), so the workload's restarts still get it; a file
// source is read again at every restart; the placeholders are drawn once
// and kept in the record, so every run sees the same ones; a missing env
// source stops the start with an error naming the credential.
func TestServiceCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a service session's agent user)")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	ctx := context.Background()
	base, err := os.MkdirTemp("", "svc-cred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DirEnv, filepath.Join(base, "services"))
	dir := t.TempDir() // the operator's: the policy, the key file, the origin's CA
	caFile := filepath.Join(dir, "upstream-ca.pem")
	leaf, err := testcert.Issue(caFile, "api.svc.test")
	if err != nil {
		t.Fatal(err)
	}
	origin, err := testorigin.Start("127.0.0.1", 0, &leaf, nil, func(r *http.Request) string { return r.URL.Path + " " + r.Header.Get("Authorization") })
	if err != nil {
		t.Fatal(err)
	}
	defer origin.Close()
	origin.Mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	got := func(path string) []string { // the Authorization headers the origin got at path
		var out []string
		for _, r := range origin.Requests() {
			if a, ok := strings.CutPrefix(r, path+" "); ok {
				out = append(out, a)
			}
		}
		return out
	}
	envValue, file1, file2 := "sk-env-0123456789abcdef0123", "sk-file-one-0123456789abcdef", "sk-file-two-fedcba9876543210"
	values := []string{envValue, file1, file2}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(file1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	polFile := filepath.Join(dir, "policy.yaml")
	net := qualify.InspectNet(caFile, qualify.Inspected{Host: "api.svc.test", IP: origin.IP, Port: origin.Port, L7: "tls: inspect"})
	if err := os.WriteFile(polFile, fmt.Appendf(nil, `version: 1
network:
  mode: proxy
%[2]scredentials:
  - name: envkey
    source: {env: CORRAL_TEST_SVC_KEY}
    expose: {env: ENV_KEY}
    endpoints:
      - {host: api.svc.test, ports: [%[1]d], path: /env/}
  - name: filekey
    source: {file: %[3]q}
    expose: {env: FILE_KEY}
    endpoints:
      - {host: api.svc.test, ports: [%[1]d], path: /file/}
`, origin.Port, net, keyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	const name = "credtest"
	rec, err := Provision(ctx, ProvisionOptions{Name: name, PolicyFile: polFile})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	defer func() {
		_, _ = Stop(name)
		if err := Deprovision(name, true); err != nil {
			t.Errorf("deprovision: %v", err)
		}
	}()
	url := fmt.Sprintf("https://api.svc.test:%d", origin.Port)
	// Each run calls both endpoints with its placeholders, prints them,
	// and ends after a while: restart on-failure runs it again.
	script := fmt.Sprintf(`echo "placeholders $ENV_KEY $FILE_KEY"
curl -sS -o /dev/null -H "Authorization: Bearer $ENV_KEY" %[1]s/env/
curl -sS -o /dev/null -H "Authorization: Bearer $FILE_KEY" %[1]s/file/
sleep 2; exit 1`, url)
	spec := &StartSpec{Command: []string{"sh", "-c", script}, Restart: "on-failure", StopGrace: Duration(2 * time.Second), ReadyTimeout: Duration(60 * time.Second)}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// The variable is a CORRAL_* one on purpose: detached.Env passes those
	// to the supervisor, and this one must go by the pipe alone.
	//
	// Without the variable in the launcher's environment: refused, naming
	// the credential, before the workload runs.
	os.Unsetenv("CORRAL_TEST_SVC_KEY")
	if _, err := Start(ctx, name, spec, StartOptions{Exe: exe}); err == nil || !strings.Contains(err.Error(), "envkey") || !strings.Contains(err.Error(), "CORRAL_TEST_SVC_KEY") {
		t.Fatalf("start without the env source: %v, want an error naming envkey and its variable", err)
	}
	if len(got("/env/")) > 0 {
		t.Fatal("the workload ran without its credential")
	}

	t.Setenv("CORRAL_TEST_SVC_KEY", envValue)
	st, err := Start(ctx, name, spec, StartOptions{Exe: exe})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; the origin got %v and %v", what, got("/env/"), got("/file/"))
			}
		}
	}
	wait("the first run's calls", func() bool { return len(got("/file/")) >= 1 })
	// The file changes while the workload runs: the next run reads it.
	if err := os.WriteFile(keyFile, []byte(file2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wait("the second run's calls", func() bool { return len(got("/file/")) >= 2 && len(got("/env/")) >= 2 })
	if e := got("/env/"); e[0] != "Bearer "+envValue || e[1] != "Bearer "+envValue {
		t.Errorf("the env source's value at the origin, run 1 and 2: %q", e)
	}
	if f := got("/file/"); f[0] != "Bearer "+file1 || f[1] != "Bearer "+file2 {
		t.Errorf("the file source's value at the origin, run 1 and 2: %q, want the file as it was at each start", f)
	}

	// The placeholders: in the record, the same in every run.
	p := PathsOf(filepath.Join(base, "services"), name)
	rec, err = LoadRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Placeholders) != 2 || rec.Placeholders["envkey"] == "" || rec.Placeholders["filekey"] == "" {
		t.Fatalf("the record's placeholders: %v", rec.Placeholders)
	}
	log, _ := os.ReadFile(p.Workload())
	runs := regexp.MustCompile(`placeholders (\S+) (\S+)`).FindAllStringSubmatch(string(log), -1)
	if len(runs) < 2 {
		t.Fatalf("workload.log: %s", log)
	}
	for _, r := range runs {
		if r[1] != rec.Placeholders["envkey"] || r[2] != rec.Placeholders["filekey"] {
			t.Errorf("a run saw placeholders %s %s, the record has %v", r[1], r[2], rec.Placeholders)
		}
	}

	// The values are nowhere but in the supervisor's memory and at the
	// origin: not its argv or environment, the record, the status, the
	// logs or the audit log.
	st, err = ReadStatus(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Credentials) != 2 || st.Credentials[0].State != "active" {
		t.Errorf("status credentials: %+v", st.Credentials)
	}
	places := map[string]string{}
	for _, f := range []string{fmt.Sprintf("/proc/%d/environ", st.Supervisor.PID), fmt.Sprintf("/proc/%d/cmdline", st.Supervisor.PID)} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		places[f] = string(b)
	}
	_ = filepath.Walk(p.Dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(path)
			places[path] = string(b)
		}
		return nil
	})
	for where, s := range places {
		for _, v := range values {
			if strings.Contains(s, v) {
				t.Errorf("%s holds the value %.10s...", where, v)
			}
		}
	}
	if _, ok := places[p.Audit()]; !ok {
		t.Errorf("no audit log at %s", p.Audit())
	}
}
