#!/usr/bin/env bash
# Builds Corral's Windows installer: OUTDIR/corral-VERSION-windows-amd64.msi
# (per machine: C:\Program Files\Corral\corral.exe, README.md, LICENSE when
# the project has one; the directory on the system PATH; an Add/Remove
# Programs entry). Runs on Linux with Debian's wixl (package wixl, from
# msitools 0.101) and Go; prints the MSI's path on stdout.
#   packaging/msi/build.sh VERSION OUTDIR
# VERSION is what `corral version` prints (stamped as -X main.version, the
# variable cmd/corral/main.go documents), e.g. v1.2.3. The MSI's
# ProductVersion is its numeric part, major.minor.build (Windows Installer
# compares only those three fields; major and minor at most 255, build at
# most 65535): v1.2.3-rc1 becomes 1.2.3, v1 becomes 1.0.0. Two builds with
# the same ProductVersion do not upgrade one another (MajorUpgrade's
# default, no same-version upgrades): CORRAL_MSI_VERSION overrides it.
#   CORRAL_MSI_KEEP   keep the staging directory (OUTDIR/msi-stage-VERSION)
#   CORRAL_MSI_SIGN_CERT, CORRAL_MSI_SIGN_KEY  PEM certificate (chain) and
#                     key: Authenticode-sign corral.exe and then the MSI with
#                     osslsigncode (SHA-256); CORRAL_MSI_SIGN_TIMESTAMP an
#                     RFC 3161 timestamp server URL (needs the network)
# amd64 only: wixl 0.101 knows x86, ia64 and x64; arm64 came to wixl
# after its 0.106 release (upstream commit e314215, 2025).
# wixl 0.101 has no Environment element either (it came in msitools
# 0.104): the Environment table is added here with msibuild, with the
# RemoveEnvironmentStrings/WriteEnvironmentStrings actions corral.wxs
# schedules.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VERSION OUTDIR" >&2; exit 2; }
version=$1 outdir=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for t in wixl msibuild; do
	command -v "$t" >/dev/null || { echo "msi build: $t missing (apt-get install wixl msitools)" >&2; exit 1; }
done

msiver=${CORRAL_MSI_VERSION:-}
if [ -z "$msiver" ]; then
	v=${version#v}
	v=${v%%[-+]*}
	IFS=. read -r ma mi bu _ <<<"$v"
	msiver=${ma:-0}.${mi:-0}.${bu:-0}
fi
if ! [[ $msiver =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] ||
	((10#${BASH_REMATCH[1]} > 255 || 10#${BASH_REMATCH[2]} > 255 || 10#${BASH_REMATCH[3]} > 65535)); then
	echo "msi build: ProductVersion $msiver (from $version) is not major.minor.build with 255.255.65535 at most" >&2
	exit 1
fi
[ "${version#v}" = "$msiver" ] || [ -n "${CORRAL_MSI_VERSION:-}" ] ||
	echo "msi build: $version is ProductVersion $msiver" >&2

mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
stage=$outdir/msi-stage-$version
rm -rf "$stage"
mkdir -p "$stage"
[ -n "${CORRAL_MSI_KEEP:-}" ] || trap 'rm -rf "$stage"' EXIT

commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
(cd "$root" && GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
	-o "$stage/corral.exe" ./cmd/corral)
sign() { # sign FILE: Authenticode, in place
	[ -n "${CORRAL_MSI_SIGN_CERT:-}" ] || return 0
	command -v osslsigncode >/dev/null || { echo "msi build: osslsigncode missing" >&2; exit 1; }
	osslsigncode sign -certs "$CORRAL_MSI_SIGN_CERT" -key "$CORRAL_MSI_SIGN_KEY" -h sha256 \
		-n Corral -i https://github.com/corral-sandbox/corral \
		${CORRAL_MSI_SIGN_TIMESTAMP:+-ts "$CORRAL_MSI_SIGN_TIMESTAMP"} -in "$1" -out "$1.signed" >&2
	mv "$1.signed" "$1"
}
sign "$stage/corral.exe"
cp "$root/README.md" "$stage/README.md"
license=no
if [ -f "$root/LICENSE" ]; then
	cp "$root/LICENSE" "$stage/LICENSE"
	license=yes
fi

msi=$outdir/corral-$version-windows-amd64.msi
rm -f "$msi"
# wixl finds the File sources in its working directory.
(cd "$stage" && wixl -a x64 -D Version="$msiver" -D HaveLicense=$license -o "$msi" "$here/corral.wxs")

# The Environment table (Windows Installer SDK, "Environment Table"): the
# name's prefix "=" sets the variable at install, "-" removes the value at
# uninstall, "*" makes it a system variable (HKLM\SYSTEM\CurrentControlSet\
# Control\Session Manager\Environment); a value "[~];X" appends X to the
# existing value, and uninstall removes just X. Component SystemPath
# (corral.wxs) owns it.
printf '%s\n' $'Environment\tName\tValue\tComponent_' $'s72\tl255\tL255\ts72' $'Environment\tEnvironment' \
	$'CorralPath\t=-*PATH\t[~];[INSTALLDIR]\tSystemPath' >"$stage/Environment.idt"
msibuild "$msi" -i "$stage/Environment.idt"
# Last: a signature covers the whole database, so nothing may change it after.
sign "$msi"
echo "$msi"
