#!/usr/bin/env bash
# Writes a go build -overlay that makes Go's os.RemoveAll work under Wine 8
# and prints its path. Go's Windows Deleteat (internal/syscall/windows,
# used by os.RemoveAll and so by every t.TempDir cleanup) deletes with
# NtSetInformationFile(FileDispositionInformationEx) and falls back to
# FileDispositionInformation only on the statuses Windows gives for it
# (STATUS_INVALID_INFO_CLASS, STATUS_INVALID_PARAMETER,
# STATUS_NOT_SUPPORTED). Wine 8 does not implement the class and answers
# STATUS_NOT_IMPLEMENTED (0xC0000002), so every removal below a directory
# failed ("Invalid function"). The overlay adds that status to the fallback;
# Windows (1607 and later) implements the class and never takes it. For the
# Windows lane only (scripts/windows-lane.sh).
#   $1  directory for the overlay (default /tmp/corral-ci/wine-overlay)
set -euo pipefail
dir=${1:-/tmp/corral-ci/wine-overlay}
src=$(go env GOROOT)/src/internal/syscall/windows/at_windows.go
mkdir -p "$dir"
sed 's|^\tcase STATUS_INVALID_INFO_CLASS, // the operating system|\tcase NTStatus(0xC0000002), /* STATUS_NOT_IMPLEMENTED: Wine 8 (corral scripts/wine/overlay.sh) */ STATUS_INVALID_INFO_CLASS, // the operating system|' \
	"$src" >"$dir/at_windows.go"
if ! grep -q 'Wine 8 (corral' "$dir/at_windows.go"; then
	echo "wine overlay: $src has changed (no Deleteat fallback switch to extend): see scripts/wine/overlay.sh" >&2
	exit 1
fi
printf '{"Replace":{"%s":"%s"}}\n' "$src" "$dir/at_windows.go" >"$dir/overlay.json"
echo "$dir/overlay.json"
