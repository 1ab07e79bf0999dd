#!/usr/bin/env bash
# Build the test cluster's binaries once per machine and cache them under
# /opt/corral-ci/k8s (CORRAL_K8S_OPT): kube-apiserver, kubelet,
# kube-controller-manager, kube-scheduler (k8s.io/kubernetes v1.37.2) and
# etcd v3.7.0 through the wrapper module scripts/k8s/kube; containerd
# v2.4.2, CNI plugins v1.9.1 (bridge, host-local, loopback), runc v1.5.3
# (cgo, libseccomp), the agent-sandbox v1.0.3 controller and its CRDs (from
# the module zip's k8s/crds), a static pause program and two local OCI image
# archives (pause; busybox from Debian's busybox-static). kubectl is built
# too only when the machine has none.
#
# Only Go modules (the module proxy; hashes pinned by each wrapper's
# go.sum) and Debian packages (apt-get: libseccomp-dev, busybox-static) are
# fetched. Skips everything when $K8S_OPT/stamp matches (versions, Go,
# busybox, the wrapper modules' hash); --force builds anyway.
#
# Go runs under `nice -n 19` with GOFLAGS=-trimpath and its own GOCACHE and
# GOMODCACHE under $K8S_OPT, both removed after a successful build (about
# 4-6 GB while it runs; CORRAL_K8S_KEEP_CACHE=1 keeps them). Per-step times
# go to stdout and $K8S_OPT/build-times.txt.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

force=false
[ "${1:-}" = --force ] && force=true

have_all() {
	local b
	for b in $K8S_BINARIES; do [ -x "$K8S_BIN/$b" ] || return 1; done
	for b in $K8S_CNI_BINARIES; do [ -x "$K8S_CNI_BIN/$b" ] || return 1; done
	command -v kubectl >/dev/null || [ -x "$K8S_BIN/kubectl" ] || return 1
	[ -s "$K8S_IMG/pause.tar" ] && [ -s "$K8S_IMG/busybox.tar" ] || return 1
	ls "$K8S_CRDS"/*.yaml >/dev/null 2>&1
}

if ! $force && [ -f "$K8S_STAMP" ] && [ "$(cat "$K8S_STAMP")" = "$(expected_stamp)" ] && have_all; then
	echo "k8s binaries up to date in $K8S_OPT ($(head -1 "$K8S_STAMP"))"
	exit 0
fi

# Debian packages: libseccomp-dev for runc's seccomp, a static busybox for
# the busybox image, a C toolchain for runc's cgo.
need=()
pkg-config --exists libseccomp 2>/dev/null || need+=(libseccomp-dev)
dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
	echo "apt-get install ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi

rm -f "$K8S_STAMP"
mkdir -p "$K8S_BIN" "$K8S_CNI_BIN" "$K8S_IMG" "$K8S_CRDS"
export GOCACHE=$K8S_OPT/gocache GOMODCACHE=$K8S_OPT/gomodcache
export GOFLAGS="-trimpath -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0
# sum.golang.org is not reachable here; every module's hash is checked
# against the wrapper's committed go.sum instead (a missing entry fails).
export GOSUMDB=off GOPROXY=${GOPROXY:-https://proxy.golang.org}
times=$K8S_OPT/build-times.txt
: > "$times"
t_all=$(date +%s)
step() { # name dir args...: go build in a wrapper module, timed
	local name=$1 dir=$2 s rc
	shift 2
	s=$(date +%s)
	(cd "$K8S_SRC/$dir" && nice -n 19 go build "$@") || { rc=$?; echo "build of $name failed" >&2; exit $rc; }
	echo "$name $(( $(date +%s) - s )) s" | tee -a "$times"
}

# pause and the image writer: standard library only.
step pause images -ldflags "-s -w" -o "$K8S_OPT/pause" ./pause
step mkimage images -ldflags "-s -w" -o "$K8S_OPT/mkimage" ./mkimage
s=$(date +%s)
"$K8S_OPT/mkimage" -name "$PAUSE_IMAGE" -file /pause="$K8S_OPT/pause" -entrypoint '["/pause"]' -user 65535:65535 -o "$K8S_IMG/pause.tar"
"$K8S_OPT/mkimage" -name "$BUSYBOX_IMAGE" -busybox "$(command -v busybox)" -entrypoint '["/bin/sh"]' -o "$K8S_IMG/busybox.tar"
echo "images $(( $(date +%s) - s )) s" | tee -a "$times"

for p in bridge host-local loopback; do
	case $p in host-local) pkg=ipam/$p ;; *) pkg=main/$p ;; esac
	step "cni-$p" cni -ldflags "-s -w" -o "$K8S_CNI_BIN/$p" "github.com/containernetworking/plugins/plugins/$pkg"
done

CLD="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
for p in containerd containerd-shim-runc-v2 ctr; do
	step "$p" containerd -tags no_btrfs -ldflags "$CLD" -o "$K8S_BIN/$p" "github.com/containerd/containerd/v2/cmd/$p"
done

CGO_ENABLED=1 step runc runc -tags seccomp -ldflags "-s -w" -o "$K8S_BIN/runc" github.com/opencontainers/runc

step agent-sandbox-controller asb -ldflags "-s -w -X sigs.k8s.io/agent-sandbox/internal/version.gitVersion=$AGENT_SANDBOX_VERSION" \
	-o "$K8S_BIN/agent-sandbox-controller" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller
asb_dir=$(cd "$K8S_SRC/asb" && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)
rm -f "$K8S_CRDS"/*.yaml
cp "$asb_dir"/k8s/crds/*.yaml "$K8S_CRDS"/
chmod 644 "$K8S_CRDS"/*.yaml

step etcd kube -ldflags "-s -w" -o "$K8S_BIN/etcd" go.etcd.io/etcd/server/v3
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
KLD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
kube=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
command -v kubectl >/dev/null || kube+=(kubectl)
for p in "${kube[@]}"; do
	step "$p" kube -ldflags "$KLD" -o "$K8S_BIN/$p" "k8s.io/kubernetes/cmd/$p"
done

echo "all $(( $(date +%s) - t_all )) s" | tee -a "$times"
peak=$(du -sh "$GOCACHE" "$GOMODCACHE" 2>/dev/null | awk '{printf "%s %s; ", $1, $2}')
echo "caches at the end of the build: $peak" | tee -a "$times"
if [ "${CORRAL_K8S_KEEP_CACHE:-}" != 1 ]; then
	go clean -modcache
	rm -rf "$GOCACHE"
fi
expected_stamp > "$K8S_STAMP"
echo "kept: $(du -sh "$K8S_OPT" | cut -f1) in $K8S_OPT" | tee -a "$times"
