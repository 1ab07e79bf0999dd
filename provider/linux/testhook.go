//go:build linux && !corraltest

package linux

// testHooks is false in every real build: see testhook_corraltest.go.
const testHooks = false

func testDropLayer() string { return "" }
