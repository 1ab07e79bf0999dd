//go:build !linux

package placeholder

import (
	"errors"

	"github.com/corral-sandbox/corral/policy"
)

// Set is the placeholders one sandbox holds; placeholders are made only
// on Linux, where the providers that bind them run.
type Set struct{}

// Acquire fails when there is anything to hold: no provider on this
// platform binds placeholders (the mxc provider reports absent names as a
// loss instead).
func Acquire(r *policy.Resolved) (*Set, error) {
	if len(r.Placeholders) > 0 {
		return nil, errors.New("placeholders are not supported on this platform")
	}
	return &Set{}, nil
}

// Release does nothing.
func (s *Set) Release() {}

// Close does nothing.
func (s *Set) Close() {}

// Made is empty.
func (s *Set) Made() []string { return nil }
