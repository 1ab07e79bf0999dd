#!/usr/bin/env bash
# Egress proxy benchmark: the figures of issue 15, in one run, so that each
# path through the proxy is compared with going direct on the same machine
# at the same time. It runs the Go benchmarks of package egress
# (egress/bench_test.go, egress/bench_inspect_test.go), each COUNT times
# (default 5; the two 1000-connection ones MEM_COUNT times, default 1), and
# prints the medians of what they report, with the ratios and the targets:
#
#   - latency: a small keep-alive GET over TLS to a loopback origin, direct,
#     through an inspected tunnel (TLS terminated, the request decided by L7
#     rules) and through a passthrough tunnel (spliced), HTTP/1.1 and
#     HTTP/2; plain HTTP direct and through the proxy. Each benchmark
#     iteration takes one sample of each path in turn, the p50 is over its
#     2000 iterations; "added" is a path's p50 minus direct's.
#     Target: inspected added p50 < 250 µs.
#   - a new connection until its TLS handshake is done (300 per run):
#     direct (TCP + TLS), inspected and passthrough (TCP + CONNECT + TLS),
#     and inspected to a host the proxy never saw (a leaf minted and the
#     upstream's protocol learned on the way). Target: inspected p50 < 2 ms.
#   - leaf minting (a new host each time) and a cached leaf: ns/op.
#     Target: minting < 0.5 ms.
#   - a 64 MiB download on a kept-alive connection, the same three ways
#     (8 per run), and 64 MiB over raw TCP direct and through a CONNECT
#     tunnel (20 per run): MB/s, the process's CPU (client, proxy and
#     origin, user + system) per byte, and each proxied transfer's
#     throughput against the direct one of the same iteration (the median
#     of those ratios). Targets: inspected >= 50 %, passthrough >= 80 % of
#     direct TLS.
#   - 1000 concurrent inspected connections (a request held at the origin
#     on each, then idle, then closed; three rounds after one of 1000
#     direct TLS connections): memory per connection, the proxy's share,
#     and what is left after close (goroutines, fds: must be back; live
#     heap: must not grow between rounds). The same for 1000 raw tunnels.
#
# and those of issue 16 (credentials, egress/bench_credential_test.go):
#
#   - a small keep-alive GET with a placeholder in Authorization through
#     an inspecting proxy without credentials (inspection alone), through
#     one with the credential bound to that host (substituted, the
#     response guarded) and through the latter to an unbound inspected
#     host; HTTP/1.1 and HTTP/2, 2000 per run; "added" is against
#     inspection alone. Target: substitution adds < 50 µs p50.
#   - 64 MiB of text (JSON lines) on a kept-alive connection through the
#     credential's proxy from the unbound host and from the bound one
#     (every byte through the reflection guard), 8 per run; the bound
#     transfer's throughput against the unbound one of the same
#     iteration. Target: the scan costs < 30 % (bound >= 70 %).
#   - the same 64 MiB gzip-encoded: passed as it is from the unbound host
#     (the client decodes it), decoded by the guard from the bound one
#     (measured), and the scanner and gzip decoding alone (MB/s).
#
# PARTS selects what runs: "proxy" (issue 15), "credentials" (issue 16),
# or both (the default, "proxy credentials").
#
# Everything (clients, proxy, origins) runs in one test process on
# loopback; on a machine with few CPUs the three share them. Writes
# bench/results/egress-<date>.md and prints it, and the benchmarks' own
# output beside it (egress-<date>.txt, for benchstat). Exits 1 when a
# benchmark failed (a wrong answer, a leak), after writing what was
# measured. Needs go and python3; no root.
set -euo pipefail
export LC_ALL=C
COUNT=${COUNT:-5}
MEM_COUNT=${MEM_COUNT:-1}
PARTS=${PARTS:-proxy credentials}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
command -v python3 >/dev/null || { echo "egress.sh: needs python3" >&2; exit 1; }
tmp=$(mktemp -d -t corral-egress-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && CGO_ENABLED=0 go test -c -o "$tmp/egress.test" ./egress)
start=$(date -Iseconds)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
status=0

# bench REGEX BENCHTIME COUNT: run the matching benchmarks, output to $tmp/out.
bench() {
	echo "egress.sh: $1 (-benchtime $2, -count $3)" >&2
	(cd "$tmp" && ./egress.test -test.run '^$' -test.bench "$1" -test.benchtime "$2" -test.count "$3" -test.timeout 60m) >>"$tmp/out" 2>&1 || status=1
}
case " $PARTS " in *" proxy "*)
	bench '^BenchmarkInspectedRequest$' 2000x "$COUNT"
	bench '^BenchmarkPlainRequest$' 2000x "$COUNT"
	bench '^BenchmarkInspectedHandshake$' 300x "$COUNT"
	bench '^BenchmarkLeaf(Mint|Cached)$' 1s "$COUNT"
	bench '^BenchmarkInspectedDownload$' 8x "$COUNT"
	bench '^BenchmarkTunnelThroughput$' 20x "$COUNT"
	bench '^Benchmark(InspectedConns|TunnelMemory)1000$' 1x "$MEM_COUNT"
	;;
esac
case " $PARTS " in *" credentials "*)
	bench '^BenchmarkCredentialRequest$' 2000x "$COUNT"
	# One process: the 64 MiB text and its gzip encoding are made once.
	bench '^Benchmark(Credential(Gzip)?Download|ReflectionScan|GzipDecode)$' 8x "$COUNT"
	;;
esac

mkdir -p "$here/results"
out=$here/results/egress-$(date +%Y-%m-%d-%H%M%S).md
export START="$start" LOAD0="$load0" LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)" SECS=$(($(date +%s) - t0))
export COMMIT="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD -- egress 2>/dev/null || echo ' (egress modified)')"
export CPUS="$(nproc)" KERNEL="$(uname -r)" GOVERSION="$(go env GOVERSION)" COUNT MEM_COUNT PARTS STATUS=$status
python3 - "$tmp/out" "$out" <<'PY'
import collections, os, re, statistics, sys

src, dst = sys.argv[1], sys.argv[2]
vals = collections.defaultdict(list)  # (benchmark, unit) -> values, one per run
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
    v = vals.get(("Benchmark" + bench, unit))
    return statistics.median(v) if v else None

def fmt(x, f="{:.0f}", suffix=""):
    return "–" if x is None else f.format(x) + suffix

def target(x, ok, text):
    if x is None:
        return text + ": not measured"
    return text + (": met" if ok(x) else ": **missed**")

L = [f"# Egress proxy benchmark, {os.environ['START']}", ""]
L.append(f"commit {os.environ['COMMIT']}, {os.environ['GOVERSION']}, {os.environ['CPUS']} CPUs, kernel {os.environ['KERNEL']}; "
         f"load average {os.environ['LOAD0']} at the start, {os.environ['LOAD1']} at the end; {os.environ['SECS']} s")
L.append("")
parts = os.environ["PARTS"].split()
L.append(f"`COUNT={os.environ['COUNT']} MEM_COUNT={os.environ['MEM_COUNT']} PARTS=\"{' '.join(parts)}\" bench/egress.sh`: the Go benchmarks of package egress, "
         "clients, proxy and loopback origins in one process; every iteration samples each path in turn. "
         f"Figures are medians over the {os.environ['COUNT']} runs of each run's median; ratios are against a baseline in the same iterations "
         "(direct for the proxy's paths; inspection alone for credentials').")
targets = []

if "proxy" in parts:
    L += ["", "## A small keep-alive GET (p50)", "",
          "| path | HTTP/1.1 | added | HTTP/2 | added |", "|---|---:|---:|---:|---:|"]
    for path, name in (("direct", "direct TLS"), ("inspected", "inspected tunnel"), ("passthrough", "passthrough tunnel")):
        row = f"| {name} |"
        for p in ("h1", "h2"):
            row += f" {fmt(med('InspectedRequest/' + p, path + '-p50-us'), suffix=' µs')} |"
            row += " – |" if path == "direct" else f" +{fmt(med('InspectedRequest/' + p, path + '-added-us'), suffix=' µs')} |"
        L.append(row)
    L.append(f"| plain HTTP direct | {fmt(med('PlainRequest', 'direct-p50-us'), suffix=' µs')} | – | | |")
    L.append(f"| plain HTTP through the proxy | {fmt(med('PlainRequest', 'proxied-p50-us'), suffix=' µs')} | +{fmt(med('PlainRequest', 'proxied-added-us'), suffix=' µs')} | | |")
    for p in ("h1", "h2"):
        a = med("InspectedRequest/" + p, "inspected-added-us")
        targets.append(target(a, lambda x: x < 250, f"inspected added p50 ({p}) < 250 µs: {fmt(a, suffix=' µs')}"))

    L += ["", "## A new connection until its TLS handshake is done (p50)", "",
          "| path | p50 | added |", "|---|---:|---:|"]
    L.append(f"| direct: TCP + TLS | {fmt(med('InspectedHandshake', 'direct-p50-us'), suffix=' µs')} | – |")
    for path, name in (("inspected", "inspected"), ("inspected-new-host", "inspected, a host the proxy never saw (leaf minted, upstream's protocol learned)"), ("passthrough", "passthrough")):
        L.append(f"| {name}: TCP + CONNECT + TLS | {fmt(med('InspectedHandshake', path + '-p50-us'), suffix=' µs')} | +{fmt(med('InspectedHandshake', path + '-added-us'), suffix=' µs')} |")
    h = med("InspectedHandshake", "inspected-p50-us")
    targets.append(target(h, lambda x: x < 2000, f"a new inspected connection's handshake p50 < 2 ms: {fmt(h, suffix=' µs')}"))
    mint, cached = med("LeafMint", "ns/op"), med("LeafCached", "ns/op")
    L += ["", "## Leaves", "", f"minting a leaf: {fmt(mint and mint / 1e3, suffix=' µs')}; the cached leaf of a host: {fmt(cached, suffix=' ns')}."]
    targets.append(target(mint, lambda x: x < 500e3, f"leaf minting < 0.5 ms: {fmt(mint and mint / 1e3, suffix=' µs')}"))

    L += ["", "## Throughput (64 MiB)", "",
          "| path | MB/s | CPU ns/B (whole process) | of direct |", "|---|---:|---:|---:|"]
    for p, proto in (("h1", "HTTP/1.1"), ("h2", "HTTP/2")):
        b = "InspectedDownload/" + p
        for path, name in (("direct", "direct TLS"), ("inspected", "inspected tunnel"), ("passthrough", "passthrough tunnel")):
            pct = "100 %" if path == "direct" else fmt(med(b, path + "-pct"), suffix=" %")
            L.append(f"| {proto} download, {name} | {fmt(med(b, path + '-MB/s'))} | {fmt(med(b, path + '-cpu-ns/B'), '{:.2f}')} | {pct} |")
        for path, want in (("inspected", 50), ("passthrough", 80)):
            x = med(b, path + "-pct")
            targets.append(target(x, lambda v, w=want: v >= w, f"{path} download ({p}) >= {want} % of direct TLS: {fmt(x, suffix=' %')}"))
    L.append(f"| raw TCP upload, direct | {fmt(med('TunnelThroughput', 'direct-MB/s'))} | {fmt(med('TunnelThroughput', 'direct-cpu-ns/B'), '{:.2f}')} | 100 % |")
    t = med("TunnelThroughput", "tunnel-pct")
    L.append(f"| raw TCP upload, CONNECT tunnel | {fmt(med('TunnelThroughput', 'tunnel-MB/s'))} | {fmt(med('TunnelThroughput', 'tunnel-cpu-ns/B'), '{:.2f}')} | {fmt(t, suffix=' %')} |")
    targets.append(target(t, lambda v: v >= 80, f"raw TCP through a tunnel >= 80 % of direct: {fmt(t, suffix=' %')}"))

    c = "InspectedConns1000"
    L += ["", "## 1000 concurrent inspected connections (HTTP/1.1)", "",
          "| per connection | direct TLS | inspected | the proxy's share |", "|---|---:|---:|---:|"]
    L.append(f"| a request in flight: heap + stacks | {fmt(med(c, 'direct-active-KiB/conn'), '{:.1f}', ' KiB')} | {fmt(med(c, 'inspected-active-KiB/conn'), '{:.1f}', ' KiB')} | {fmt(med(c, 'proxy-active-KiB/conn'), '{:.1f}', ' KiB')} (stacks {fmt(med(c, 'proxy-active-stack-KiB/conn'), '{:.1f}', ' KiB')}; RSS {fmt(med(c, 'proxy-active-RSS-KiB/conn'), '{:.1f}', ' KiB')}) |")
    L.append(f"| idle (kept alive): heap + stacks | {fmt(med(c, 'direct-idle-KiB/conn'), '{:.1f}', ' KiB')} | {fmt(med(c, 'inspected-idle-KiB/conn'), '{:.1f}', ' KiB')} | – |")
    gl, fl, lh, gr = (med(c, u) for u in ("goroutines-left", "fds-left", "live-heap-left-KiB", "live-heap-growth-KiB"))
    L += ["", f"After close: {fmt(gl)} goroutines and {fmt(fl)} fds more than before; live heap {fmt(lh, suffix=' KiB')} above the state before "
          f"(the runtime's goroutine records and maps at their high-water size), {fmt(gr, '{:+.0f}', ' KiB')} from the first round's close to the last's. "
          "In flight, the proxy holds a client-facing and an upstream connection for each (idle, its upstream pool keeps at most 64: the idle figures are the whole process's)."]
    targets.append(target(gl, lambda v: v <= 0 and (fl or 0) <= 0 and (gr or 0) < 1024, "no leak after close (goroutines, fds, live heap)"))
    tm = "TunnelMemory1000"
    L += ["", f"1000 idle raw CONNECT tunnels: the proxy's heap + stacks {fmt(med(tm, 'proxy-heap-KiB/tunnel'), '{:.1f}', ' KiB')} per tunnel."]

if "credentials" in parts:
    L += ["", "## Credentials (issue 16)", "", "### A small keep-alive GET with a placeholder in Authorization (p50)", "",
          "| path | HTTP/1.1 | added | HTTP/2 | added |", "|---|---:|---:|---:|---:|"]
    for path, name in (("inspected", "inspecting proxy without credentials (inspection alone)"),
                       ("substituted", "the credential's proxy, its bound host: value substituted, response guarded"),
                       ("unbound", "the credential's proxy, an unbound inspected host (placeholder looked for)")):
        row = f"| {name} |"
        for p in ("h1", "h2"):
            row += f" {fmt(med('CredentialRequest/' + p, path + '-p50-us'), suffix=' µs')} |"
            row += " – |" if path == "inspected" else f" {fmt(med('CredentialRequest/' + p, path + '-added-us'), '{:+.0f}', ' µs')} |"
        L.append(row)
    for p in ("h1", "h2"):
        a = med("CredentialRequest/" + p, "substituted-added-us")
        targets.append(target(a, lambda x: x < 50, f"substitution added p50 ({p}) < 50 µs over inspection alone: {fmt(a, suffix=' µs')}"))
    L += ["", "### 64 MiB through the credential's proxy", "",
          "| path | MB/s | CPU ns/B (whole process) | of unbound |", "|---|---:|---:|---:|"]
    for p, proto in (("h1", "HTTP/1.1"), ("h2", "HTTP/2")):
        b = "CredentialDownload/" + p
        for path, name in (("unbound", "text, unbound host (inspection alone)"), ("bound", "text, bound host (reflection guard)"),
                           ("inspected", "text, bound host through the proxy without credentials")):
            pct = "100 %" if path == "unbound" else fmt(med(b, path + "-pct"), suffix=" %")
            L.append(f"| {proto} {name} | {fmt(med(b, path + '-MB/s'))} | {fmt(med(b, path + '-cpu-ns/B'), '{:.2f}')} | {pct} |")
        x = med(b, "bound-pct")
        targets.append(target(x, lambda v: v >= 70, f"reflection scan ({p}) costs < 30 % throughput (bound >= 70 % of unbound): {fmt(x, suffix=' %')}"))
    for p, proto in (("h1", "HTTP/1.1"), ("h2", "HTTP/2")):
        b = "CredentialGzipDownload/" + p
        L.append(f"| {proto} gzip, unbound host (passed encoded, the client decodes) | {fmt(med(b, 'unbound-MB/s'))} | {fmt(med(b, 'unbound-cpu-ns/B'), '{:.2f}')} | 100 % |")
        L.append(f"| {proto} gzip, bound host (the guard decodes, scans, sends decoded) | {fmt(med(b, 'bound-MB/s'))} | {fmt(med(b, 'bound-cpu-ns/B'), '{:.2f}')} | {fmt(med(b, 'bound-pct'), suffix=' %')} |")
    L += ["", f"gzip: MB/s and CPU are of the 64 MiB decoded. Alone, in one goroutine: the reflection scanner {fmt(med('ReflectionScan', 'MB/s'))} MB/s, "
          f"gzip decoding {fmt(med('GzipDecode', 'MB/s'))} MB/s (of the forms of a 31-byte value, in 16 KiB reads of the same text)."]

L += ["", "## Targets", ""] + ["- " + t for t in targets]
if os.environ["STATUS"] != "0":
    L += ["", "## A benchmark failed", "", "```"]
    L += [l.rstrip() for l in open(src) if re.search(r"FAIL|--- |bench_.*_test.go:\d+", l)][:40]
    L += ["```"]
open(dst, "w").write("\n".join(L) + "\n")
PY
cp "$tmp/out" "${out%.md}.txt"
cat "$out"
if [ "$status" != 0 ]; then
	tail -50 "$tmp/out" >&2
	exit 1
fi
