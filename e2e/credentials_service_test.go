//go:build linux

package e2e

// Credentials in a service session (docs/service.md, "Credentials"): the
// supervisor holds the values, the workload the placeholders, across
// restarts of the workload.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/qualify"
)

// TestCredentialService: a service session with an env-sourced and a
// file-sourced credential, as root (an agent user) and unprivileged. The
// workload calls the bound origin with both placeholders at each start;
// the origin receives the real values. The env source's value, read
// from `service start`'s environment, survives a crash of the workload;
// the file source is read again, so a rotated file is the next run's
// value; the placeholders stay the same. No value is in the
// supervisor's command line or environment, the record, the status, the
// logs, the audit log or the home; status lists the credentials. A start
// without the env source's variable fails naming the credential (122).
func TestCredentialService(t *testing.T) {
	needTool(t, "curl")
	eachIdent(t, func(t *testing.T, id *ident) {
		o := newOrigin(t, "api.allowed.test", "127.0.0.85", true)
		envVal, fileVal1, fileVal2 := realValue("svcenv_"), realValue("svcfile1_"), realValue("svcfile2_")
		secrets := []string{envVal, fileVal1, fileVal2}
		var seen seenLog
		bearerOrigin(o, map[string]string{"env": envVal, "file1": fileVal1, "file2": fileVal2}, &seen)
		src := secretFile(t, id, fileVal1)
		creds := fmt.Sprintf(`credentials:
  - name: envkey
    source: {env: E2E_SVC_ENV}
    expose: {env: ENV_TOKEN}
    endpoints:
      - {host: api.allowed.test, ports: [%[1]d], path: /bearer/env/}
  - name: filekey
    source: {file: %[2]q}
    expose: {file: /run/secrets/filekey}
    endpoints:
      - {host: api.allowed.test, ports: [%[1]d], path: /bearer/file/}
`, o.port, src)
		n := qualify.InspectNet(upstreamCAFile(t, id), o.inspected("access: read-only"))
		s := newSvc(t, id)
		name := "cred" + id.name
		s.must(t, "service", "provision", name, "--policy", writePolicy(t, id, policy{Network: "proxy", NetRules: n, Credentials: creds}))
		rec := s.record(t, name)
		// Each start of the workload: its placeholders, then one call with
		// each, on paths of its own (the run's start time).
		script := `r=$(date +%s%N); echo "ph: $ENV_TOKEN $(cat /run/secrets/filekey)"
curl -sS -m 20 -H "Authorization: Bearer $ENV_TOKEN" ` + o.url("/bearer/env/") + `$r
curl -sS -m 20 -H "Authorization: Bearer $(cat /run/secrets/filekey)" ` + o.url("/bearer/file/") + `$r
exec sleep 3600`
		// calls waits for the k-th run's two calls and returns which
		// value each carried.
		calls := func(k int) (env, file string) {
			t.Helper()
			for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				var envs, files []string
				for _, l := range seen.all() {
					path, v, _ := strings.Cut(l, " ")
					switch {
					case strings.HasPrefix(path, "/bearer/env/"):
						envs = append(envs, v)
					case strings.HasPrefix(path, "/bearer/file/"):
						files = append(files, v)
					}
				}
				if len(envs) >= k && len(files) >= k {
					return envs[k-1], files[k-1]
				}
			}
			t.Fatalf("run %d's calls did not reach the origin: %q\n%s", k, o.requests(), s.run(t, "service", "logs", name))
			return "", ""
		}
		s.env = []string{"E2E_SVC_ENV=" + envVal}
		s.must(t, "service", "start", name, "--stop-grace", "5s", "--", "sh", "-c", script)
		s.env = nil
		env, file := calls(1)
		if env != "Bearer "+envVal || file != "Bearer "+fileVal1 {
			t.Errorf("run 1: the origin received %s and %s, want the env source's and the file's values", who(strings.TrimPrefix(env, "Bearer "), envVal, ""), who(strings.TrimPrefix(file, "Bearer "), fileVal1, ""))
		}
		st, r := s.status(t, name)
		for _, c := range []string{"envkey", "filekey"} {
			if !strings.Contains(r.stdout, c) {
				t.Errorf("status does not list credential %s:\n%s", c, r.stdout)
			}
		}
		procNoLeak := func(pid int, what string) {
			t.Helper()
			for _, f := range []string{"cmdline", "environ"} {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
				if err != nil {
					t.Errorf("%s's %s: %v", what, f, err)
					continue
				}
				assertNoLeak(t, fmt.Sprintf("%s's /proc/%d/%s", what, pid, f), string(b), secrets...)
			}
		}
		procNoLeak(st.Supervisor.PID, "the supervisor")
		procNoLeak(st.Workload.PID, "the workload")

		// Rotate the file, crash the workload: the next run reads the file
		// again and keeps the env source's value.
		writeFile(t, id, src, fileVal2+"\n", 0o600)
		if err := syscall.Kill(st.Workload.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		env, file = calls(2)
		if env != "Bearer "+envVal || file != "Bearer "+fileVal2 {
			t.Errorf("run 2 (after a crash): the origin received %s and %s, want the env source's value kept and the rotated file's", who(strings.TrimPrefix(env, "Bearer "), envVal, ""), who(strings.TrimPrefix(file, "Bearer "), fileVal2, ""))
		}
		logs := s.must(t, "service", "logs", name).stdout
		var phs []string
		for _, l := range strings.Split(logs, "\n") {
			if v, ok := strings.CutPrefix(l, "ph: "); ok {
				phs = append(phs, v)
			}
		}
		if len(phs) < 2 || phs[0] != phs[1] || strings.Count(phs[0], "corral-") != 2 {
			t.Errorf("the placeholders of the two runs: %q, want the same two", phs)
		}
		st, _ = s.status(t, name)
		procNoLeak(st.Supervisor.PID, "the supervisor")
		s.must(t, "service", "stop", name)

		// Nothing corral wrote holds a value: the record, status, logs and
		// audit log under the service directory, and the session's home.
		assertNoLeak(t, "the logs", logs, secrets...)
		assertTreeNoLeak(t, s.dir, secrets...)
		assertTreeNoLeak(t, rec.Home, secrets...)
		if b, err := os.ReadFile(filepath.Join(s.dir, name, "log", "audit.jsonl")); err != nil || !strings.Contains(string(b), "credential") {
			t.Errorf("the session's audit log (%v) does not record the credentials used", err)
		}

		// Without the env source's variable the start fails before the
		// workload runs, naming the credential.
		before := len(seen.all())
		r = s.run(t, "service", "start", name)
		if r.code != 122 || !strings.Contains(r.stderr, "envkey") || !strings.Contains(r.stderr, "E2E_SVC_ENV") {
			t.Errorf("start without E2E_SVC_ENV: want exit 122 naming credential envkey and the variable\n%s", r)
		}
		assertNoLeak(t, "the failed start's output", r.combined(), secrets...)
		time.Sleep(time.Second)
		if got := len(seen.all()); got != before {
			t.Errorf("the workload ran: the origin got %d more requests", got-before)
		}
	})
}
