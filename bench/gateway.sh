#!/usr/bin/env bash
# Load on corral gateway, in one run: sandboxes created, exec'd once and
# deleted concurrently through one gateway, LEVELS at once (default 1 8
# 100), on each of PROVIDERS (default docker linux: a provider the gateway
# refuses is reported "not available: <the gateway's reason>", not a
# failure), at least SAMPLES sandboxes per level and provider (default 100:
# 100 rounds of 1, 13 of 8, 2 of 100, after one warm-up round). After
# every round e2e's TestGatewayLoad checks that nothing of them is left —
# store rows, containers, state dirs, output logs, cgroups, processes —
# and over a level's rounds that the gateway's fds did not grow with the
# sandboxes. The baseline is the same cycle on plain Docker through its API
# (no corral), a round after each gateway round so both see the same
# machine (BASELINE=0 leaves it out).
#
# Reports create, first exec, delete and create+exec+delete per sandbox,
# p50 / p99, with the ratios against one at once and against plain Docker,
# and the medians of each step from the daemon's events, into
# bench/results/gateway-<date>.md and stdout. Needs root and a Docker
# daemon with corral/base:1 (corral image build-base). Exits 1 when the test
# failed (a leak, an error), after writing what it measured.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.."
levels=${LEVELS:-1 8 100}
providers=${PROVIDERS:-docker linux}
samples=${SAMPLES:-100}
baseline=${BASELINE:-1}
[ "$(id -u)" = 0 ] || { echo "gateway.sh: run as root (the gateway tests run the gateway as root)" >&2; exit 1; }
docker image inspect corral/base:1 >/dev/null 2>&1 || { echo "gateway.sh: needs the image corral/base:1 (corral image build-base)" >&2; exit 1; }
mkdir -p bench/results
out=bench/results/gateway-$(date +%Y-%m-%d-%H%M%S).md
tables=$(mktemp)
trap 'rm -f "$tables"' EXIT
start=$(date -Iseconds)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
status=0
log=$(CGO_ENABLED=0 CORRAL_TEST_DOCKER=1 CORRAL_GATEWAY_LOAD="$levels" CORRAL_GATEWAY_PROVIDERS="$providers" \
	CORRAL_GATEWAY_SAMPLES="$samples" CORRAL_GATEWAY_BASELINE="$baseline" CORRAL_GATEWAY_REPORT="$tables" \
	go test -count=1 -v -timeout 90m -run 'TestGatewayLoad$' ./e2e 2>&1) || status=$?
{
	echo "# corral gateway load, $start"
	echo
	echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (work tree modified)'), $(nproc) CPUs, kernel $(uname -r), $(docker version --format 'Docker {{.Server.Version}}' 2>/dev/null), cgroups $(docker info --format '{{.CgroupDriver}} v{{.CgroupVersion}}' 2>/dev/null); load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(($(date +%s) - t0)) s"
	echo
	echo "\`LEVELS='$levels' PROVIDERS='$providers' SAMPLES=$samples BASELINE=$baseline bench/gateway.sh\`: per sandbox, create (until ready), its first exec (\`echo N\`, until its exit status) and delete (until answered), each sandbox's calls in sequence and the sandboxes of a round at once; p50 / p99 by nearest rank; ratios are p50 / p99 against the same provider one at a time and against plain Docker at the same level."
	cat "$tables"
	if [ "$status" != 0 ]; then
		echo
		echo "## The test failed (exit $status)"
		echo
		echo '```'
		grep -E -- '--- FAIL|left behind|grew from|: (create|exec|delete|remove) [0-9]+:|panic|FAIL' <<<"$log" | head -50 || true
		echo '```'
	fi
} >"$out"
cat "$out"
if [ "$status" != 0 ]; then
	echo "$log" | tail -100 >&2
	exit 1
fi
