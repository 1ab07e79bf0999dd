//go:build !linux

package policy

// leftoverPlaceholder is false: placeholders are made on Linux only.
func leftoverPlaceholder(path string) bool { return false }
