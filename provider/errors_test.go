package provider

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// Wrap reads as "code: what: cause" and keeps the cause for errors.Is and
// errors.As, also under a further %w.
func TestWrapKeepsCause(t *testing.T) {
	_, cause := os.Open(filepath.Join(t.TempDir(), "absent"))
	err := Wrap(CodeProvisionFailed, "docker: read state", cause)
	if want := "provision_failed: docker: read state: " + cause.Error(); err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if got := Wrap(CodeTimeout, "", context.Canceled).Error(); got != "timeout: context canceled" {
		t.Errorf("Wrap without a message = %q", got)
	}
	outer := fmt.Errorf("run: %w", err)
	if !errors.Is(outer, fs.ErrNotExist) {
		t.Error("errors.Is does not see fs.ErrNotExist through Wrap")
	}
	var errno syscall.Errno
	if !errors.As(outer, &errno) || !errors.Is(errno, fs.ErrNotExist) {
		t.Errorf("errors.As *syscall.Errno = %v", errno)
	}
	var pe *fs.PathError
	if !errors.As(outer, &pe) || pe.Op != "open" {
		t.Errorf("errors.As *fs.PathError = %v", pe)
	}
	if CodeOf(outer) != CodeProvisionFailed {
		t.Errorf("CodeOf = %s", CodeOf(outer))
	}
	// What Errorf with %v built loses it: the reason for Wrap.
	if errors.Is(Errorf(CodeProvisionFailed, "read state: %v", cause), fs.ErrNotExist) {
		t.Error("Errorf kept a cause it cannot keep")
	}
}
