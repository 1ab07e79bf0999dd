package wine

import (
	"os"
	"runtime"
	"testing"
)

// TestDetected: the lane sets CORRAL_WINE_LANE=1, so under it Detected
// must be true; on Linux it must be false.
func TestDetected(t *testing.T) {
	switch {
	case runtime.GOOS != "windows":
		if Detected() {
			t.Fatal("Detected() on " + runtime.GOOS)
		}
	case os.Getenv("CORRAL_WINE_LANE") == "1":
		if !Detected() {
			t.Fatal("running in the Wine lane but Detected() is false")
		}
	}
}
