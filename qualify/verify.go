//go:build linux

package qualify

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
)

// ErrMismatch is wrapped by Verify's error when the report does not match
// (as opposed to a report that cannot be read).
var ErrMismatch = errors.New("the report does not match")

// Verify checks that the report at reportPath binds what is here: the
// sha256 of bin (the corral binary), this host's kernel release and
// Landlock ABI, and that each recorded policy text still has its recorded
// sha256 (the report was not edited). It returns nil when everything
// matches; otherwise an error listing every mismatch, wrapping ErrMismatch.
func Verify(reportPath, bin string) error {
	b, err := os.ReadFile(reportPath)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: not a qualify report: %w", reportPath, err)
	}
	if r.SchemaVersion != SchemaVersion {
		return fmt.Errorf("%s: schema_version %d, this corral reads %d", reportPath, r.SchemaVersion, SchemaVersion)
	}
	var problems []string
	sum, err := fileSHA256(bin)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("the binary: %v", err))
	case sum != r.Binary.SHA256:
		problems = append(problems, fmt.Sprintf("report was made with a different corral binary: the report has sha256 %s, %s has %s", r.Binary.SHA256, bin, sum))
	}
	if k := kernelRelease(); k != r.Host.Kernel {
		problems = append(problems, fmt.Sprintf("report was made on another kernel: %s, this host runs %s", r.Host.Kernel, k))
	}
	if a := landlockABI(); a != r.Host.LandlockABI {
		problems = append(problems, fmt.Sprintf("report was made with Landlock ABI %d, this host has %d", r.Host.LandlockABI, a))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Policies)) {
		p := r.Policies[k]
		s := sha256.Sum256([]byte(p.Text))
		if hex.EncodeToString(s[:]) != p.SHA256 {
			problems = append(problems, fmt.Sprintf("policy %s: its text does not have its recorded sha256 (the report was edited)", k))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	err = ErrMismatch
	for _, p := range problems {
		err = fmt.Errorf("%w\n  %s", err, p)
	}
	return err
}

// Schema is the JSON Schema (draft 2020-12) of report.json.
//
//go:embed schema.json
var Schema []byte
