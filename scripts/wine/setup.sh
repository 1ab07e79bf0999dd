#!/usr/bin/env bash
# Sets up Wine to run Corral's Windows build (the CI's Windows lane,
# scripts/windows-lane.sh): installs Debian's wine and mingw-w64 (and wixl
# and msitools, for the MSI step) if missing,
# builds the ProcessPrng shim (bcryptprimitives.c: Go >= 1.24's runtime
# needs it, Wine 8 lacks it), boots a prefix and puts the shim in its
# system32. Idempotent and fast when done. Prints the prefix on stdout
# (everything else goes to stderr).
#   WINEPREFIX   the prefix (default /tmp/corral-ci/wineprefix)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export WINEPREFIX="${WINEPREFIX:-/tmp/corral-ci/wineprefix}"
export WINEDEBUG=-all
# No Mono or Gecko: nothing under test needs .NET or a browser engine, and
# without a display wineboot would otherwise wait on their install dialogs.
export WINEDLLOVERRIDES="mscoree,mshtml="

if ! command -v wine >/dev/null 2>&1 || ! [ -x /usr/lib/wine/wine64 ] || ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
	echo "wine setup: installing wine64 and gcc-mingw-w64-x86-64" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine wine64 gcc-mingw-w64-x86-64 >&2
fi
# wixl and msibuild (Debian's wixl and msitools packages, msitools 0.101):
# the lane's MSI step builds packaging/msi/corral.wxs with them.
if ! command -v wixl >/dev/null 2>&1 || ! command -v msibuild >/dev/null 2>&1; then
	echo "wine setup: installing wixl and msitools" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wixl msitools >&2
fi

# The shim, rebuilt when its sources change.
build=$(dirname "$WINEPREFIX")/wine-shim
dll=$build/bcryptprimitives.dll
mkdir -p "$build"
if ! [ -f "$dll" ] || [ "$here/bcryptprimitives.c" -nt "$dll" ] || [ "$here/bcryptprimitives.def" -nt "$dll" ]; then
	x86_64-w64-mingw32-gcc -shared -O2 -o "$dll.tmp" "$here/bcryptprimitives.c" "$here/bcryptprimitives.def" -ladvapi32
	mv "$dll.tmp" "$dll"
fi

# The prefix: booted once (~10 s); the registry is on disk once its
# wineserver has exited.
if ! [ -f "$WINEPREFIX/system.reg" ]; then
	echo "wine setup: booting $WINEPREFIX" >&2
	wineboot --init </dev/null >&2 2>&1
	wineserver -w
fi
sys32=$WINEPREFIX/drive_c/windows/system32
[ -d "$sys32" ] || { echo "wine setup: $sys32 missing after wineboot" >&2; exit 1; }
cmp -s "$dll" "$sys32/bcryptprimitives.dll" || cp "$dll" "$sys32/bcryptprimitives.dll"

echo "$WINEPREFIX"
