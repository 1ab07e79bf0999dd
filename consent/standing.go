package consent

import (
	"time"

	"github.com/corral-sandbox/corral/policy"
)

// Standing is a placeholder until the standing grants file lands (helper H7 replaces this file).
type Standing struct{ Path string }

func (s *Standing) Covers(Kind, string, policy.Access) bool { return false }
func (s *Standing) Add(Kind, string, policy.Access, string, time.Time) (string, error) {
	return "", nil
}
func OpenStanding(*policy.Resolved) (*Standing, string, error) { return nil, "", nil }
