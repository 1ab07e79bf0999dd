#!/usr/bin/env bash
# Consent benchmark: the figures of issue 17 ("Performance"), in one run,
# each against a baseline measured in the same sandbox in the same
# iterations. It runs the Go benchmarks of session/bench_consent_test.go,
# which open a real linux sandbox through session.Open (network proxy, a
# consent ceiling of one folder and *.bench.test), each COUNT times
# (default 5) for ITER iterations (default 300), and prints the medians
# (over the runs) of each run's p50 and p95:
#
#   - folder grant from the approval to effective: consent.Broker.Decide
#     approving a read-only folder request (digest, folder looked up
#     again, the slot holder's mount, the read-back of the sandbox's
#     mountinfo). Baseline: the provider's GrantFolder of the same folder
#     alone. Target: p50 < 5 ms.
#   - host grant from the approval to effective: Decide approving a host
#     request (the proxy rebuilt with the allow entry, switched in keeping
#     its connections, the rule read back). Baseline: Decide denying a
#     host request (the broker alone). Target: p50 < 2 ms.
#   - approval visible to a waiting request: from the call of Decide
#     (approving a folder, so the wait answers after the read-back) to
#     the return of a waiter blocked in Broker.Wait, and of the
#     workload's HTTP long-poll (GET /v1/requests/ID/wait). Baseline:
#     the same wake-up for a deny. Target: p50 <= 1 s.
#
# Writes bench/results/consent-<date>.txt (the summary, then the
# benchmarks' own output, for benchstat) and prints it. Exits 1 when a
# benchmark failed. Needs go and python3; root for the sandbox's layers
# as the other linux benchmarks (unprivileged works, with the layers the
# host allows).
set -euo pipefail
export LC_ALL=C
COUNT=${COUNT:-5}
ITER=${ITER:-300}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
command -v python3 >/dev/null || { echo "consent.sh: needs python3" >&2; exit 1; }
tmp=$(mktemp -d -t corral-consent-bench.XXXXXX)
chmod 755 "$tmp" # the test binary is the sandbox's init: another uid runs it
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && CGO_ENABLED=0 go test -c -o "$tmp/session.test" ./session)
start=$(date -Iseconds)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
status=0
echo "consent.sh: BenchmarkConsent (-benchtime ${ITER}x, -count $COUNT)" >&2
(cd "$tmp" && ./session.test -test.run '^$' -test.bench '^BenchmarkConsent' -test.benchtime "${ITER}x" -test.count "$COUNT" -test.timeout 60m) >"$tmp/out" 2>&1 || status=1

mkdir -p "$here/results"
out=$here/results/consent-$(date +%Y-%m-%d-%H%M%S).txt
export START="$start" LOAD0="$load0" LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)" SECS=$(($(date +%s) - t0))
export COMMIT="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export CPUS="$(nproc)" KERNEL="$(uname -r)" GOVERSION="$(go env GOVERSION)" COUNT ITER STATUS=$status UID_="$(id -u)"
python3 - "$tmp/out" "$out" <<'PY'
import collections, os, re, statistics, sys

src, dst = sys.argv[1], sys.argv[2]
vals = collections.defaultdict(list)  # (benchmark, unit) -> one value per run
for line in open(src):
    m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$", line)
    if not m:
        continue
    f = m.group(3).split()
    for v, unit in zip(f[0::2], f[1::2]):
        try:
            vals[(m.group(1), unit)].append(float(v))
        except ValueError:
            pass

def med(bench, unit):
    v = vals.get(("BenchmarkConsent" + bench, unit))
    return statistics.median(v) if v else None

def ms(x):
    return "-" if x is None else "%.3f ms" % (x / 1000)

def ratio(x):
    return "-" if x is None else "%.2fx" % x

def target(x, limit_us, text):
    if x is None:
        return text + ": not measured"
    return text + (": met" if x < limit_us else ": MISSED")

L = ["Consent benchmark, " + os.environ["START"],
     "commit %s, %s, %s CPUs, kernel %s, uid %s; load average %s at the start, %s at the end; %s s" % (
         os.environ["COMMIT"], os.environ["GOVERSION"], os.environ["CPUS"], os.environ["KERNEL"], os.environ["UID_"],
         os.environ["LOAD0"], os.environ["LOAD1"], os.environ["SECS"]),
     "COUNT=%s ITER=%s bench/consent.sh: session/bench_consent_test.go in a real linux sandbox (session.Open);" % (os.environ["COUNT"], os.environ["ITER"]),
     "medians over the runs of each run's p50 / p95; the ratio is the measured p50 over the baseline's p50 of the same iterations.",
     ""]
rows = [
    ("folder grant, approval to effective", "FolderGrant", "decide", "bare-grant", "bare GrantFolder"),
    ("host grant, approval to effective", "HostGrant", "decide", "deny", "Decide denying"),
    ("approval seen by Broker.Wait", "WaitWake", "wait-approve", "wait-deny", "wake-up on a deny"),
]
L.append("%-40s %12s %12s   %-20s %12s %12s %8s" % ("", "p50", "p95", "baseline", "p50", "p95", "ratio"))
for title, b, m, base, bname in rows:
    L.append("%-40s %12s %12s   %-20s %12s %12s %8s" % (title, ms(med(b, m + "-p50-µs")), ms(med(b, m + "-p95-µs")),
             bname, ms(med(b, base + "-p50-µs")), ms(med(b, base + "-p95-µs")), ratio(med(b, "ratio-p50"))))
L.append("%-40s %12s %12s" % ("approval seen by the HTTP long-poll", ms(med("WaitWake", "http-approve-p50-µs")), ms(med("WaitWake", "http-approve-p95-µs"))))
L.append("")
L.append(target(med("FolderGrant", "decide-p50-µs"), 5000, "folder grant p50 < 5 ms"))
L.append(target(med("HostGrant", "decide-p50-µs"), 2000, "host grant p50 < 2 ms"))
L.append(target(med("WaitWake", "http-approve-p50-µs"), 1000001, "approval visible to a waiting request p50 <= 1 s"))
if os.environ["STATUS"] != "0":
    L.append("a benchmark FAILED: see its output below")
L += ["", "--- go test -bench output", ""]
L += open(src).read().splitlines()
open(dst, "w").write("\n".join(L) + "\n")
print("\n".join(L))
print("\nwritten to " + dst, file=sys.stderr)
PY
exit $status
