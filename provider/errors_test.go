package provider

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

var allCodes = []Code{CodeUnavailable, CodePolicyRejected, CodeProvisionFailed, CodeStartFailed,
	CodeExecFailed, CodeStopFailed, CodeNotFound, CodeStale, CodeTimeout, CodeInternal}

// Every code has its own documented exit status, below 128 so it cannot be
// mistaken for 128+signal, and not 0, 1 or 2.
func TestExitCodesDistinct(t *testing.T) {
	seen := map[int]Code{}
	for _, c := range allCodes {
		n := c.ExitCode()
		if n < 3 || n >= 128 {
			t.Errorf("%s exits %d, want 3..127", c, n)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%s and %s share exit %d", c, prev, n)
		}
		seen[n] = c
	}
	if Code("bogus").ExitCode() != CodeInternal.ExitCode() {
		t.Error("an unknown code must map to internal")
	}
}

func TestCodeOfWrapped(t *testing.T) {
	err := fmt.Errorf("run: %w", LayerError(CodeStartFailed, "landlock", errors.New("abi 0")))
	if CodeOf(err) != CodeStartFailed {
		t.Fatalf("CodeOf = %s", CodeOf(err))
	}
	if !strings.Contains(err.Error(), "layer landlock") {
		t.Errorf("message %q does not name the layer", err)
	}
	if CodeOf(errors.New("plain")) != CodeInternal {
		t.Error("an error without a code must be internal")
	}
}

func TestRejectedListsOnlyErrors(t *testing.T) {
	r := LossReport{
		{Severity: SeverityWarning, Field: "network.mode", Message: "host"},
		{Severity: SeverityError, Field: "layers.cgroups", Message: "unavailable"},
	}
	if !r.HasErrors() || len(r.Errors()) != 1 {
		t.Fatalf("HasErrors/Errors wrong for %v", r)
	}
	e := Rejected(r)
	if e.Code != CodePolicyRejected || !strings.Contains(e.Msg, "layers.cgroups: unavailable") || strings.Contains(e.Msg, "network.mode") {
		t.Errorf("Rejected = %+v", e)
	}
	if (LossReport{{Severity: SeverityInfo}}).HasErrors() {
		t.Error("info must not count as an error")
	}
}
