//go:build !linux

package main

import (
	"context"
	"errors"
)

// runDoctorEgress: the trust self-test runs Linux sandboxes.
func runDoctorEgress(context.Context, string, outputFormat) error {
	return errors.New("corral doctor --egress runs on Linux hosts only in this build")
}
