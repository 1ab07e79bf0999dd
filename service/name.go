package service

import (
	"fmt"
	"regexp"
	"sync"
)

// The parts of the service package every backend shares (the linux one
// here, the isolation_session one in service/isolation): session names
// and what may be shown of a workload's output. Portable: no build tag.

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]{0,23}$`) })

// ValidName checks a session name: a lower-case letter, then up to 23
// lower-case letters, digits or '-' (so "corral-NAME" fits useradd's 32).
func ValidName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("service name %q: use a lower-case letter then up to 23 of [a-z0-9-], e.g. openclaw", name)
	}
	return nil
}
