//go:build !linux

package policy

// IsPlaceholder is false: placeholders are made on Linux only.
func IsPlaceholder(path string) bool { return false }
