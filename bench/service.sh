#!/usr/bin/env bash
# corral service benchmark (root). In one script, so the ratios compare
# runs on the same machine at the same time:
#
#   1. one-shot: `corral service run -- true` (a throwaway session: record,
#      agent user, home, supervisor in the foreground, removal) against
#      `corral run -- true` (the same sandbox without a session), RUNS each
#      (default 30), hyperfine -N.
#   2. start: `corral service start` of a Python HTTP server with
#      --ready-port and --settle 0s, until the launcher returns (the server
#      accepts connections inside the session), then `corral service stop`
#      between runs (hyperfine --prepare), START_RUNS (default 10).
#
# Medians are computed from hyperfine's per-run times. Writes
# bench/results/service-<date>.md. Needs hyperfine and python3.
set -euo pipefail
RUNS=${RUNS:-30}
START_RUNS=${START_RUNS:-10}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "service.sh: run as root (a session has an agent user)" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "service.sh: needs hyperfine (apt-get install hyperfine)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'CORRAL_SERVICE_DIR=$tmp/svc "$bin" service stop bench >/dev/null 2>&1 || true; CORRAL_SERVICE_DIR=$tmp/svc "$bin" service deprovision --force bench >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
bin=$tmp/corral
(cd "$repo" && CGO_ENABLED=0 go build -o "$bin" ./cmd/corral)
export CORRAL_SERVICE_DIR=$tmp/svc
mkdir -p "$tmp/wd"
cd "$tmp/wd"

hyperfine -N -w 3 -r "$RUNS" --export-json "$tmp/oneshot.json" \
	-n "corral run" "$bin run -- true" \
	-n "corral service run" "$bin service run -- true" >/dev/null

"$bin" service provision bench >/dev/null
"$bin" service start bench --ready-port 8080 --settle 0s -- python3 -m http.server -b 127.0.0.1 8080 >/dev/null
hyperfine -N -r "$START_RUNS" --export-json "$tmp/start.json" \
	--prepare "$bin service stop bench" \
	-n "corral service start (ready)" "$bin service start bench --settle 0s" >/dev/null
"$bin" service stop bench >/dev/null

mkdir -p "$repo/bench/results"
out=${OUT:-$repo/bench/results/service-$(date +%Y-%m-%d-%H%M%S).md}
commit=$(git -C "$repo" rev-parse --short HEAD)
python3 - "$tmp/oneshot.json" "$tmp/start.json" "$commit" >"$out" <<'PY'
import json, statistics, sys, os
def med(path):
    return {r["command"]: statistics.median(r["times"]) * 1000 for r in json.load(open(path))["results"]}
one, start = med(sys.argv[1]), med(sys.argv[2])
commit = sys.argv[3]
print(f"# corral service benchmark\n\ncommit {commit}, {os.cpu_count()} CPUs, kernel {os.uname().release}, root\n")
print("| command | median |\n|---|---:|")
for k, v in list(one.items()) + list(start.items()):
    print(f"| {k} | {v:.1f} ms |")
r = one["corral service run"] / one["corral run"]
print(f"\ncorral service run / corral run: {r:.2f}x (the session: record, agent user, home, removal)")
PY
cat "$out"
