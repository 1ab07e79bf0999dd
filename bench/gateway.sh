#!/usr/bin/env bash
# Load on corral gateway: N sandboxes (default 100) created, exec'd and
# deleted concurrently through the API, three times (the last round is
# reported), by e2e's TestGatewayLoad, which also checks that nothing
# leaks (rows, containers, state dirs, the gateway's fds). Needs root and a
# Docker daemon with corral/base:1 (corral image build-base). Writes
# bench/results/gateway-<date>.md with the create and exec p50/p99.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.."
n=${N:-100}
mkdir -p bench/results
out=bench/results/gateway-$(date +%Y-%m-%d-%H%M%S).md
log=$(CGO_ENABLED=0 CORRAL_TEST_DOCKER=1 CORRAL_GATEWAY_LOAD=$n go test -count=1 -v -timeout 30m -run 'TestGatewayLoad$' ./e2e 2>&1) || { echo "$log" >&2; exit 1; }
line=$(grep -o "[0-9]* sandboxes: create p50 .*" <<<"$log")
{
	echo "# corral gateway load, $(date -Iseconds)"
	echo
	echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs, kernel $(uname -r), $(docker version --format 'Docker {{.Server.Version}}' 2>/dev/null)"
	echo
	echo "$line (last of three rounds; $n concurrent create + exec + delete; nothing leaked)"
} >"$out"
cat "$out"
