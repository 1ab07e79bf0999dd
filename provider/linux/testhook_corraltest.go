//go:build linux && corraltest

package linux

import "os"

// testHooks, only in binaries built with -tags corraltest, lets a test
// start a sandbox whose seccomp layer is silently missing — init skips it
// and the supervisor's own check passes it — so that the checks made
// later from outside (corral service status) can be shown to catch it.
const testHooks = true

// testDropLayer names the layer to drop: $CORRAL_TEST_DROP_LAYER.
func testDropLayer() string { return os.Getenv("CORRAL_TEST_DROP_LAYER") }
