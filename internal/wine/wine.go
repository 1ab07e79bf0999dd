// Package wine tells a Windows test it is running under Wine (the CI's
// Windows lane, scripts/windows-lane.sh), so that a behaviour Wine does
// not implement can be skipped as a Wine artifact with a stated reason,
// never silently. On real Windows and on other systems nothing is skipped.
package wine

import "testing"

// ArtifactPrefix starts the skip message of every Wine artifact; the lane
// counts skips by it.
const ArtifactPrefix = "Wine artifact: "

// NoSymlinks is the reason of tests that make symbolic links: Wine 8's
// CreateSymbolicLinkW (kernelbase) is a stub that reports success and
// creates nothing, so os.Symlink returns nil and no link exists.
const NoSymlinks = "CreateSymbolicLinkW is a stub: it reports success and creates nothing"

// Detected reports whether this process runs under Wine.
func Detected() bool { return detected() }

// SkipArtifact skips t with ArtifactPrefix+reason when running under Wine.
// reason says what Wine lacks, e.g. "CreateSymbolicLinkW is not
// implemented".
func SkipArtifact(t testing.TB, reason string) {
	t.Helper()
	if Detected() {
		t.Skip(ArtifactPrefix + reason)
	}
}
