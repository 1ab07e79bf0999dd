//go:build !linux

package relay

// confine does nothing here: on Windows the relay's children are ended
// with the container (docs/relay.md, "Security").
func confine() error { return nil }

// killOrphans does nothing here (see confine).
func killOrphans() {}
