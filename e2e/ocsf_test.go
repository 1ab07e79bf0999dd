package e2e

import (
	"bufio"
	"bytes"
	"os"
	"testing"

	"github.com/corral-sandbox/corral/internal/ocsfcheck"
)

// checkAudit validates every event of data, the JSON Lines audit log
// called name, against the official OCSF schema of the version Corral
// declares (internal/ocsfcheck): any error or warning the OCSF Server's
// validator would report fails the test. Every e2e run with --audit goes
// through it (corral), as do a gateway sandbox's log and a service
// session's. It returns the number of events.
func checkAudit(t *testing.T, name string, data []byte) int {
	t.Helper()
	s, err := ocsfcheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	n := 0
	for sc.Scan() {
		n++
		r := s.Validate(sc.Bytes())
		for _, p := range append(r.Errors, r.Warnings...) {
			t.Errorf("%s:%d: OCSF %s: %s\n%s", name, n, ocsfcheck.Version, p, sc.Bytes())
		}
	}
	return n
}

// checkAuditFile is checkAudit of the regular file at path, if there is
// one (the test that asked for it says whether there had to be; a link
// there is a test's bait, not an audit log).
func checkAuditFile(t *testing.T, path string) {
	t.Helper()
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return
	}
	if b, err := os.ReadFile(path); err == nil {
		checkAudit(t, path, b)
	}
}
