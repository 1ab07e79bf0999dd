#!/usr/bin/env bash
# Builds Corral's Debian package: packaging/deb/build.sh VERSION OUTDIR
# writes OUTDIR/corral_VERSION_ARCH.deb (ARCH: this Go toolchain's GOARCH,
# or $GOARCH) and prints its path. VERSION is a Debian version (0.1.0,
# 0.0.0~ci1); `corral version` shows it (-X main.version). The package:
# /usr/bin/corral (static, CGO_ENABLED=0, with the embedded sandbox init of
# `go generate ./provider/linux`), a man page per command (corral __man),
# bash, zsh and fish completions (corral completion), README.md and docs/
# under /usr/share/doc/corral, and the maintainer scripts beside this file
# (docs/install.md). nfpm comes from the module proxy at a pinned version
# (NFPM overrides: an nfpm command).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 VERSION OUTDIR" >&2; exit 2; }
version=$1
out=$2
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=0
case $version in
[0-9]*) ;;
*) echo "$0: VERSION $version must start with a digit (deb-version(7))" >&2; exit 2 ;;
esac

goarch=${GOARCH:-$(go env GOARCH)}
case $goarch in # Debian's names for Go's
386) arch=i386 ;;
arm) arch=armhf ;;
*) arch=$goarch ;;
esac
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit-dirty"
# Reproducible pages and archive times: the last commit's date.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

stage=$(mktemp -d "${TMPDIR:-/tmp}/corral-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
go generate ./provider/linux
GOOS=linux GOARCH=$goarch go build -ldflags "-X main.version=$version -X main.commit=$commit" -o "$stage/corral" ./cmd/corral

# Man pages and completions come from the binary's own command tree; a
# cross-built binary cannot run here, so take them from a host build.
gen=$stage/corral
if [ "$goarch" != "$(go env GOHOSTARCH)" ]; then
	gen=$stage/corral-host
	GOARCH= go build -ldflags "-X main.version=$version" -o "$gen" ./cmd/corral
fi
"$gen" __man "$stage/man"
gzip -9n "$stage"/man/*.1
mkdir "$stage/completions"
"$gen" completion bash >"$stage/completions/corral.bash"
"$gen" completion zsh >"$stage/completions/_corral"
"$gen" completion fish >"$stage/completions/corral.fish"
rm -f "$stage/corral-host"
# README.md's links into docs/ keep working from /usr/share/doc/corral.
mkdir -p "$stage/doc"
cp README.md "$stage/doc/"
cp -R docs "$stage/doc/docs"

mkdir -p "$out"
deb="$(cd "$out" && pwd)/corral_${version}_${arch}.deb"
# nfpm expands variables in a few fields only: the config gets its values here.
maintainer=${MAINTAINER:-Corral developers <corral@corral-sandbox.invalid>}
esc() { printf '%s' "$1" | sed 's/[&|\\]/\\&/g'; }
sed -e "s|\${VERSION}|$(esc "$version")|g" -e "s|\${ARCH}|$arch|g" -e "s|\${STAGE}|$(esc "$stage")|g" \
	-e "s|\${MAINTAINER}|$(esc "$maintainer")|g" -e "s|packaging/deb/|$PWD/packaging/deb/|g" packaging/deb/nfpm.yaml >"$stage/nfpm.yaml"
nfpm=${NFPM:-go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0}
$nfpm package --config "$stage/nfpm.yaml" --packager deb --target "$deb" >&2
echo "$deb"
