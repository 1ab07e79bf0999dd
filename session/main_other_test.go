//go:build !linux

package session_test

import (
	"os"
	"testing"

	"github.com/corral-sandbox/corral/internal/testworkload"
)

// TestMain lets the test binary be the credential source commands'
// workload (credentials_test.go); on Linux bench_consent_test.go's does.
func TestMain(m *testing.M) {
	testworkload.Main()
	os.Exit(m.Run())
}
