#!/usr/bin/env bash
# Corral start-up benchmark.
#
# Times, in one hyperfine run, RUNS (default 100) executions each of
#   corral    corral run -C <fresh temp workdir> -- true   (built-in default policy)
#   bwrap     bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true
#   baseline  true
# with a freshly created, empty temp workdir before every single run (for all
# three commands alike, via hyperfine --prepare), and no shell in between
# (hyperfine -N). Median, p90 and mean are computed here from hyperfine's raw
# per-run times (--export-json), not taken from its summary.
#
# Memory:
#   - "tree max RSS (GNU time %M)": /usr/bin/time -f %M on `corral run -- true`.
#     %M is ru_maxrss from wait4() on the corral process. Linux folds into it
#     the ru_maxrss of every descendant that was waited for, so it is the
#     largest single process of the whole tree (supervisor, corral-init and
#     the workload), NOT a sum and NOT the supervisor alone.
#   - supervisor / init VmHWM: peak RSS of each process on its own, read from
#     /proc/<pid>/status while `corral run -- sleep 1` runs (polled every
#     ~20 ms; the last value seen before the process goes away is kept; VmHWM
#     is a high-water mark so the last sample is the peak up to that moment).
#     The init is the child of corral whose cmdline starts with "corral-init".
#
# Environment: RUNS (default 100), WARMUP (default 5), MEM_RUNS (default 5),
# OUT (results file; default bench/results/startup-<date>.md).
#
# Targets: corral median no worse than bwrap's; corral's own memory (supervisor
# and init, each) under 15 MiB.
set -euo pipefail

RUNS=${RUNS:-100}
WARMUP=${WARMUP:-5}
MEM_RUNS=${MEM_RUNS:-5}
TARGET_MEM_KIB=$((15 * 1024))

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

log() { printf 'startup.sh: %s\n' "$*" >&2; }

# --- dependencies ---------------------------------------------------------
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
	log "installing: ${need[*]}"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >/dev/null; then
		log "install failed; running apt-get update and retrying"
		apt-get update >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >/dev/null
	fi
fi
command -v go >/dev/null 2>&1 || { log "go not found in PATH"; exit 1; }

# --- build ----------------------------------------------------------------
tmp=$(mktemp -d -t corral-bench.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
log "building corral into $tmp"
(cd "$repo" && CGO_ENABLED=0 go build -o "$tmp/corral" ./cmd/corral)
corral=$tmp/corral
bwrap_bin=$(command -v bwrap)
true_bin=$(command -v true)
wd=$tmp/wd          # recreated empty before every run
mkdir -p "$wd" "$tmp/home"
cd "$tmp/home"      # hyperfine's own cwd: a stable dir that is never removed

# Sanity: each command must succeed once before timing.
"$corral" run -C "$wd" -- true || { log "corral run -- true failed (exit $?)"; exit 1; }
"$bwrap_bin" --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true ||
	{ log "bwrap failed (exit $?)"; exit 1; }

# --- timing ---------------------------------------------------------------
# hyperfine -N also runs --prepare without a shell, so it is one script.
prep=$tmp/prep.sh
printf '#!/bin/sh\nrm -rf "%s" && mkdir "%s"\n' "$wd" "$wd" >"$prep"
chmod +x "$prep"
json=$tmp/hyperfine.json
log "timing $RUNS runs each (warmup $WARMUP)"
hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" \
	--prepare "$prep" \
	--export-json "$json" \
	-n corral "$corral run -C $wd -- true" \
	-n bwrap "$bwrap_bin --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true" \
	-n baseline "$true_bin" >"$tmp/hyperfine.out" 2>&1 || {
	cat "$tmp/hyperfine.out" >&2
	exit 1
}

# --- memory ---------------------------------------------------------------
log "measuring memory ($MEM_RUNS runs each)"
tree_rss=()
for _ in $(seq "$MEM_RUNS"); do
	rm -rf "$wd" && mkdir "$wd"
	/usr/bin/time -f %M -o "$tmp/time.out" "$corral" run -C "$wd" -- true ||
		{ log "corral run -- true failed under /usr/bin/time"; exit 1; }
	tree_rss+=("$(cat "$tmp/time.out")")
done
bwrap_rss=()
for _ in $(seq "$MEM_RUNS"); do
	/usr/bin/time -f %M -o "$tmp/time.out" "$bwrap_bin" --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true
	bwrap_rss+=("$(cat "$tmp/time.out")")
done

hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }
sup_hwm=()
init_hwm=()
for _ in $(seq "$MEM_RUNS"); do
	rm -rf "$wd" && mkdir "$wd"
	"$corral" run -C "$wd" -- sleep 1 &
	sup=$!
	init=""
	s=""
	i=""
	while kill -0 "$sup" 2>/dev/null; do
		v=$(hwm "$sup")
		[ -n "$v" ] && s=$v
		if [ -z "$init" ]; then
			for c in $(cat /proc/"$sup"/task/*/children 2>/dev/null); do
				if tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -q '^corral-init'; then
					init=$c
					break
				fi
			done
		fi
		if [ -n "$init" ]; then
			v=$(hwm "$init")
			[ -n "$v" ] && i=$v
		fi
		sleep 0.02
	done
	wait "$sup" || { log "corral run -- sleep 1 failed"; exit 1; }
	[ -n "$s" ] || { log "could not read the supervisor's VmHWM"; exit 1; }
	[ -n "$i" ] || { log "could not find corral-init under pid $sup"; exit 1; }
	sup_hwm+=("$s")
	init_hwm+=("$i")
done

# --- report ---------------------------------------------------------------
mkdir -p "$here/results"
out=${OUT:-$here/results/startup-$(date +%Y-%m-%d-%H%M%S).md}
export RUNS WARMUP MEM_RUNS TARGET_MEM_KIB
export TREE_RSS="${tree_rss[*]}" BWRAP_RSS="${bwrap_rss[*]}" SUP_HWM="${sup_hwm[*]}" INIT_HWM="${init_hwm[*]}"
export KERNEL="$(uname -r)" CPUS="$(nproc)" COMMIT="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export BWRAP_VERSION="$(bwrap --version 2>/dev/null || true)" HYPERFINE_VERSION="$(hyperfine --version)"
export CGROUPS="$(if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo v2; else echo v1; fi)" UID_NOW="$(id -u)"
python3 - "$json" "$out" <<'PY'
import json, os, statistics, sys, datetime

src, out = sys.argv[1], sys.argv[2]
res = {r["command"]: r for r in json.load(open(src))["results"]}

def pct(xs, p):
    # nearest-rank percentile on sorted samples
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, -(-p * len(xs) // 100) - 1))
    return xs[int(k)]

rows = {}
for name in ("corral", "bwrap", "baseline"):
    r = res[name]
    t = [x * 1000.0 for x in r["times"]]
    bad = [c for c in r.get("exit_codes", []) if c != 0]
    if bad:
        sys.exit(f"{name}: {len(bad)} runs exited non-zero")
    rows[name] = dict(n=len(t), median=statistics.median(t), p90=pct(t, 90),
                      mean=statistics.fmean(t), min=min(t), max=max(t))

def ints(v):
    return [int(x) for x in os.environ[v].split()]

tree, bw, sup, ini = ints("TREE_RSS"), ints("BWRAP_RSS"), ints("SUP_HWM"), ints("INIT_HWM")
mib = lambda k: k / 1024.0
ratio = rows["corral"]["median"] / rows["bwrap"]["median"]
over_true = {k: rows[k]["median"] - rows["baseline"]["median"] for k in ("corral", "bwrap")}
target = int(os.environ["TARGET_MEM_KIB"])
ok_time = rows["corral"]["median"] <= rows["bwrap"]["median"]
ok_mem = max(sup) < target and max(ini) < target

L = []
L.append(f"# Corral start-up benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}")
L.append("")
L.append(f"commit {os.environ['COMMIT']}, kernel {os.environ['KERNEL']}, {os.environ['CPUS']} CPUs, "
         f"uid {os.environ['UID_NOW']}, cgroups {os.environ['CGROUPS']}, {os.environ['BWRAP_VERSION']}, "
         f"{os.environ['HYPERFINE_VERSION']}")
L.append("")
L.append(f"Wall time, {os.environ['RUNS']} runs each after {os.environ['WARMUP']} warm-up runs "
         "(hyperfine -N, fresh empty temp workdir before every run):")
L.append("")
L.append("| command | runs | median ms | p90 ms | mean ms | min ms | max ms |")
L.append("|---|---:|---:|---:|---:|---:|---:|")
for name, r in rows.items():
    L.append(f"| {name} | {r['n']} | {r['median']:.2f} | {r['p90']:.2f} | {r['mean']:.2f} | {r['min']:.2f} | {r['max']:.2f} |")
L.append("")
L.append(f"corral/bwrap ratio of medians: **{ratio:.2f}x** "
         f"(over baseline `true`: corral +{over_true['corral']:.2f} ms, bwrap +{over_true['bwrap']:.2f} ms)")
L.append("")
L.append(f"Peak RSS, {os.environ['MEM_RUNS']} runs each (KiB; max of runs shown, all runs in brackets):")
L.append("")
L.append("| what | how | peak | MiB |")
L.append("|---|---|---:|---:|")
L.append(f"| corral supervisor | VmHWM of `corral run -- sleep 1` | {max(sup)} {sup} | {mib(max(sup)):.1f} |")
L.append(f"| corral-init (sandbox pid 1) | VmHWM of the corral-init child | {max(ini)} {ini} | {mib(max(ini)):.1f} |")
L.append(f"| corral tree, largest single process | GNU time %M of `corral run -- true` | {max(tree)} {tree} | {mib(max(tree)):.1f} |")
L.append(f"| bwrap tree, largest single process | GNU time %M of the bwrap command | {max(bw)} {bw} | {mib(max(bw)):.1f} |")
L.append("")
L.append("GNU time's %M is ru_maxrss of the waited-for process, into which Linux folds the max RSS of every "
         "descendant it reaped: it is the largest single process of the tree (supervisor, init or workload), "
         "not a sum and not the supervisor alone.")
L.append("")
L.append("Targets:")
L.append("")
L.append(f"- median no worse than bwrap's: **{'PASS' if ok_time else 'FAIL'}** "
         f"({rows['corral']['median']:.2f} ms vs {rows['bwrap']['median']:.2f} ms)")
L.append(f"- corral's own memory under 15 MiB (supervisor and init each): **{'PASS' if ok_mem else 'FAIL'}** "
         f"(supervisor {mib(max(sup)):.1f} MiB, init {mib(max(ini)):.1f} MiB)")
text = "\n".join(L) + "\n"
open(out, "w").write(text)
print(text)
PY
log "results written to $out"
