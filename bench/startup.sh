#!/usr/bin/env bash
# Corral start-up benchmark: corral against bubblewrap, side by side in each
# hyperfine run, with where corral's time goes and what its processes weigh.
#
# Wall time (hyperfine -N: no shell; RUNS runs each after WARMUP; medians,
# p90 and means computed here from hyperfine's raw per-run times):
#   as root (the built-in default policy; cgroups required):
#     corral    corral run -C <fresh empty dir> -- true
#     bwrap     bwrap --unshare-all --die-with-parent --clearenv (PATH, HOME set)
#               --ro-bind / / --dev /dev --proc /proc true
#     baseline  true
#     corral-git / bwrap-git        git status in a real repository (a local
#                                   clone of this one), read-write; under
#                                   corral the workload is not root, and
#                                   sees root's files through an idmapped
#                                   mount, so every index entry's uid
#                                   differs and git re-reads each file
#     corral-python / bwrap-python  python3 -c pass
#   as the unprivileged USER (default corral-test), with the policy
#   `layers: {cgroups: optional}` (cgroup v1 is root's alone), against
#   bwrap as that user: corral-user / bwrap-user, and git status in a clone
#   of the user's own: corral-user-git / bwrap-user-git.
# The fresh empty workdir is made before every run of every command
# (hyperfine --prepare), so each pays the same.
#
# Where the time goes: TRACE_RUNS runs of `corral run --trace-startup -- true`
# as root; the median, per phase, of when it ended (ms since the
# supervisor's exec) and of how long it took since the mark before.
#
# Memory (MEM_RUNS runs each; KiB):
#   - supervisor and init VmHWM, each on its own: the peak RSS in
#     /proc/<pid>/status of `corral run -- sleep 1` and of its corral-init
#     child, polled every ~20 ms (a high-water mark: the last value seen is
#     the peak up to then). The egress proxy is not a process of its own:
#     it is served by the supervisor, so its memory is the supervisor's.
#     RSS counts the pages of the corral binary the process touched;
#     RssAnon (the largest seen) is its own memory.
#   - "tree max RSS": /usr/bin/time -f %M of `corral run -- true`, ru_maxrss
#     of corral, into which Linux folds that of every descendant it reaped:
#     the largest single process of the tree, not a sum.
#
# BASE_REV (a git revision; unset: none) adds corral-base, the same
# `corral run -- true` of corral built at that revision, to the root run:
# the before of a change, measured beside the after.
#
# Environment: BASE_REV, RUNS (default 50), WARMUP (5), MEM_RUNS (5), TRACE_RUNS (20),
# USER_NAME (corral-test; empty skips the unprivileged part), OUT (results
# file; default bench/results/startup-<date>.md).
#
# Targets (issue 21): root ≤ 1.5× bwrap's median; unprivileged ≤ 1.2×;
# git status and python3 ≤ 1.3×; each corral process < 10 MiB peak RSS.
set -euo pipefail

RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
MEM_RUNS=${MEM_RUNS:-5}
TRACE_RUNS=${TRACE_RUNS:-20}
USER_NAME=${USER_NAME-corral-test}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

log() { printf 'startup.sh: %s\n' "$*" >&2; }

# --- dependencies ---------------------------------------------------------
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v git >/dev/null 2>&1 || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
	log "installing: ${need[*]}"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >/dev/null; then
		apt-get update >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >/dev/null
	fi
fi
command -v go >/dev/null 2>&1 || { log "go not found in PATH"; exit 1; }
[ "$(id -u)" = 0 ] || { log "run as root (the unprivileged part runs as \$USER_NAME)"; exit 1; }
if [ -n "$USER_NAME" ] && ! id "$USER_NAME" >/dev/null 2>&1; then
	log "no user $USER_NAME (set USER_NAME= to skip the unprivileged part)"
	exit 1
fi

# --- build ----------------------------------------------------------------
tmp=$(mktemp -d -t corral-bench.XXXXXX)
chmod 755 "$tmp"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
log "building corral into $tmp"
(cd "$repo" && CGO_ENABLED=0 go generate ./provider/linux && CGO_ENABLED=0 go build -o "$tmp/corral" ./cmd/corral)
corral=$tmp/corral
base=()
if [ -n "${BASE_REV:-}" ]; then
	log "building corral at $BASE_REV"
	git -C "$repo" worktree add -q --detach "$tmp/base-src" "$BASE_REV"
	(cd "$tmp/base-src" && CGO_ENABLED=0 go build -o "$tmp/corral-base" ./cmd/corral)
	git -C "$repo" worktree remove --force "$tmp/base-src"
	base=(-n corral-base "$tmp/corral-base run -C $tmp/wd -- true")
fi
bw=$(command -v bwrap)
# A scrubbed environment, as corral gives (a caller's variables can cost a
# tool more than the sandbox: python3 reads PYTHON* and site paths).
bwrap="$bw --unshare-all --die-with-parent --clearenv --setenv PATH /usr/local/bin:/usr/bin:/bin --setenv HOME /tmp --ro-bind / / --dev /dev --proc /proc"
wd=$tmp/wd # recreated empty before every run
gitrepo=$tmp/repo
git clone -q "$repo" "$gitrepo"
mkdir -p "$wd" "$tmp/home"
cd "$tmp/home" # hyperfine's own cwd: a stable dir that is never removed
prep=$tmp/prep.sh
printf '#!/bin/sh\nrm -rf "%s" && mkdir "%s"\n' "$wd" "$wd" >"$prep"
chmod 755 "$prep"

# Sanity: each command must succeed once before timing.
"$corral" run -C "$wd" -- true || { log "corral run -- true failed (exit $?)"; exit 1; }
"$corral" run -C "$gitrepo" -- git status --short >/dev/null || { log "corral run -- git status failed"; exit 1; }
$bwrap --bind "$gitrepo" "$gitrepo" --chdir "$gitrepo" git status --short >/dev/null || { log "bwrap git status failed"; exit 1; }

# --- timing ---------------------------------------------------------------
log "timing $RUNS runs each as root (warmup $WARMUP)"
hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" --prepare "$prep" --export-json "$tmp/root.json" \
	-n corral "$corral run -C $wd -- true" \
	"${base[@]}" \
	-n bwrap "$bwrap true" \
	-n baseline "$(command -v true)" \
	-n corral-git "$corral run -C $gitrepo -- git status --short" \
	-n bwrap-git "$bwrap --bind $gitrepo $gitrepo --chdir $gitrepo git status --short" \
	-n corral-python "$corral run -C $wd -- python3 -c pass" \
	-n bwrap-python "$bwrap --chdir $wd python3 -c pass" >"$tmp/root.out" 2>&1 ||
	{ cat "$tmp/root.out" >&2; exit 1; }
if [ -n "$USER_NAME" ]; then
	log "timing $RUNS runs each as $USER_NAME"
	uwd=$tmp/uwd
	install -d -o "$USER_NAME" "$uwd" "$tmp/uhome"
	# Without cgroups the limits are not enforced: 0 says so (no warning).
	printf 'version: 1\nlayers: {cgroups: optional}\nprocess:\n  limits: {memory: 0, cpu: 0}\n' >"$tmp/user-policy.yaml"
	chmod 644 "$tmp/user-policy.yaml"
	uprep=$tmp/uprep.sh
	printf '#!/bin/sh\nrm -rf "%s" && mkdir "%s"\n' "$uwd/w" "$uwd/w" >"$uprep"
	chmod 755 "$uprep"
	su -s /bin/sh "$USER_NAME" -c "cd $tmp/uhome && $corral run -p $tmp/user-policy.yaml -C $uwd -- true" ||
		{ log "corral run as $USER_NAME failed"; exit 1; }
	git clone -q "$repo" "$uwd/repo" && chown -R "$USER_NAME:$(id -gn "$USER_NAME")" "$uwd/repo"
	su -s /bin/sh "$USER_NAME" -c "cd $tmp/uhome && hyperfine -N --style basic --warmup $WARMUP --runs $RUNS --prepare $uprep --export-json $uwd/user.json \
		-n corral-user '$corral run -p $tmp/user-policy.yaml -C $uwd/w -- true' \
		-n bwrap-user '$bwrap true' \
		-n corral-user-git '$corral run -p $tmp/user-policy.yaml -C $uwd/repo -- git status --short' \
		-n bwrap-user-git '$bwrap --bind $uwd/repo $uwd/repo --chdir $uwd/repo git status --short'" >"$tmp/user.out" 2>&1 || { cat "$tmp/user.out" >&2; exit 1; }
	cp "$uwd/user.json" "$tmp/user.json"
fi

# --- where the time goes --------------------------------------------------
log "tracing $TRACE_RUNS runs"
: >"$tmp/trace.txt"
for _ in $(seq "$TRACE_RUNS"); do
	rm -rf "$wd" && mkdir "$wd"
	"$corral" run --trace-startup -C "$wd" -- true 2>>"$tmp/trace.txt"
done

# --- memory ---------------------------------------------------------------
log "measuring memory ($MEM_RUNS runs each)"
tree_rss=()
bwrap_rss=()
for _ in $(seq "$MEM_RUNS"); do
	rm -rf "$wd" && mkdir "$wd"
	/usr/bin/time -f %M -o "$tmp/time.out" "$corral" run -C "$wd" -- true
	tree_rss+=("$(cat "$tmp/time.out")")
	/usr/bin/time -f %M -o "$tmp/time.out" $bwrap true
	bwrap_rss+=("$(cat "$tmp/time.out")")
done
hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }
anon() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }
sup_hwm=()
init_hwm=()
sup_anon=()
init_anon=()
for _ in $(seq "$MEM_RUNS"); do
	rm -rf "$wd" && mkdir "$wd"
	"$corral" run -C "$wd" -- sleep 1 &
	sup=$!
	init="" s="" i="" sa=0 ia=0
	while kill -0 "$sup" 2>/dev/null; do
		v=$(hwm "$sup")
		[ -n "$v" ] && s=$v
		v=$(anon "$sup")
		[ -n "$v" ] && [ "$v" -gt "$sa" ] && sa=$v
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
			v=$(anon "$init")
			[ -n "$v" ] && [ "$v" -gt "$ia" ] && ia=$v
		fi
		sleep 0.02
	done
	wait "$sup" || { log "corral run -- sleep 1 failed"; exit 1; }
	[ -n "$s" ] && [ -n "$i" ] || { log "could not read the supervisor's or init's VmHWM"; exit 1; }
	sup_hwm+=("$s")
	init_hwm+=("$i")
	sup_anon+=("$sa")
	init_anon+=("$ia")
done

# --- report ---------------------------------------------------------------
mkdir -p "$here/results"
out=${OUT:-$here/results/startup-$(date +%Y-%m-%d-%H%M%S).md}
export RUNS WARMUP MEM_RUNS TRACE_RUNS USER_NAME
export TREE_RSS="${tree_rss[*]}" BWRAP_RSS="${bwrap_rss[*]}" SUP_HWM="${sup_hwm[*]}" INIT_HWM="${init_hwm[*]}"
export SUP_ANON="${sup_anon[*]}" INIT_ANON="${init_anon[*]}"
export KERNEL="$(uname -r)" CPUS="$(nproc)" COMMIT="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export BWRAP_VERSION="$(bwrap --version 2>/dev/null || true)" HYPERFINE_VERSION="$(hyperfine --version)"
export CGROUPS="$(if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo v2; else echo v1; fi)"
python3 - "$tmp" "$out" <<'PY'
import json, os, re, statistics, sys, datetime, collections

tmp, out = sys.argv[1], sys.argv[2]

def load(name):
    p = os.path.join(tmp, name)
    if not os.path.exists(p):
        return {}
    rows = {}
    for r in json.load(open(p))["results"]:
        if any(c != 0 for c in r.get("exit_codes", [])):
            sys.exit(f"{r['command']}: a run exited non-zero")
        t = sorted(x * 1000.0 for x in r["times"])
        rows[r["command"]] = dict(n=len(t), median=statistics.median(t), p90=t[max(0, -(-90 * len(t) // 100) - 1)],
                                  mean=statistics.fmean(t), min=t[0], max=t[-1])
    return rows

rows = {**load("root.json"), **load("user.json")}
L = [f"# Corral start-up benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}", "",
     f"commit {os.environ['COMMIT']}, kernel {os.environ['KERNEL']}, {os.environ['CPUS']} CPUs, cgroups {os.environ['CGROUPS']}, "
     f"{os.environ['BWRAP_VERSION']}, {os.environ['HYPERFINE_VERSION']}; `bench/startup.sh`", "",
     f"Wall time, {os.environ['RUNS']} runs each after {os.environ['WARMUP']} warm-up runs (hyperfine -N, a fresh empty "
     "workdir before every run; root, then the unprivileged user in a run of its own):", "",
     "| command | runs | median ms | p90 ms | mean ms | min ms | max ms |", "|---|---:|---:|---:|---:|---:|---:|"]
for name, r in rows.items():
    L.append(f"| {name} | {r['n']} | {r['median']:.2f} | {r['p90']:.2f} | {r['mean']:.2f} | {r['min']:.2f} | {r['max']:.2f} |")
L += ["", "Ratios of medians against bwrap's in the same run, and the targets:", "",
      "| what | ratio | target | |", "|---|---:|---:|---|"]
for a, b, target, what in [("corral", "corral-base", None, "`true`, root: this build against the BASE_REV build"),
                           ("corral", "bwrap", 1.5, "`true`, root, default policy (cgroups required)"),
                           ("corral-user", "bwrap-user", 1.2, f"`true`, {os.environ['USER_NAME'] or 'unprivileged'}, cgroups optional"),
                           ("corral-git", "bwrap-git", 1.3, "`git status` in a real repository, root (the workload's uid is not the files')"),
                           ("corral-user-git", "bwrap-user-git", 1.3, "`git status` in a real repository of the unprivileged user's"),
                           ("corral-python", "bwrap-python", 1.3, "`python3 -c pass`, root")]:
    if a in rows and b in rows:
        ratio = rows[a]["median"] / rows[b]["median"]
        if target is None:
            L.append(f"| {what} | {ratio:.2f}x | | |")
        else:
            L.append(f"| {what} | {ratio:.2f}x | {target}x | {'PASS' if ratio <= target else 'FAIL'} |")

marks = collections.defaultdict(list)
for line in open(os.path.join(tmp, "trace.txt")):
    m = re.match(r"corral:\s+([\d.]+) \(\s*\+([\d.]+)\)\s+(\S+)\s+(.*)$", line)
    if m:
        marks[(m[3], m[4].strip())].append((float(m[1]), float(m[2])))
L += ["", f"Where the time goes: `corral run --trace-startup -- true` as root, {os.environ['TRACE_RUNS']} runs; per mark the "
      "median of when it came (ms since the supervisor's exec, on CLOCK_MONOTONIC) and of the time since the mark before "
      "(in a run's own order). Marks \"in the background\" are goroutines beside the critical path.", "",
      "| at ms | took ms | process | phase ended |", "|---:|---:|---|---|"]
for k in sorted(marks, key=lambda k: statistics.median(a for a, _ in marks[k])):
    L.append(f"| {statistics.median(a for a, _ in marks[k]):.2f} | {statistics.median(d for _, d in marks[k]):.2f} | {k[0]} | {k[1]} |")

ints = lambda v: [int(x) for x in os.environ[v].split()]
tree, bw, sup, ini = ints("TREE_RSS"), ints("BWRAP_RSS"), ints("SUP_HWM"), ints("INIT_HWM")
sup_anon, ini_anon = ints("SUP_ANON"), ints("INIT_ANON")
mib = lambda k: k / 1024.0
limit = 10 * 1024
L += ["", f"Peak RSS, {os.environ['MEM_RUNS']} runs each (KiB; the largest, all runs in brackets):", "",
      "| process | how | peak KiB | MiB | < 10 MiB |", "|---|---|---:|---:|---|",
      f"| corral supervisor (and its egress proxy) | VmHWM of `corral run -- sleep 1` | {max(sup)} {sup} | {mib(max(sup)):.1f} | {'PASS' if max(sup) < limit else 'FAIL'} |",
      f"| corral-init (the sandbox's pid 1) | VmHWM of the corral-init child | {max(ini)} {ini} | {mib(max(ini)):.1f} | {'PASS' if max(ini) < limit else 'FAIL'} |",
      f"| corral tree, largest single process | GNU time %M of `corral run -- true` | {max(tree)} {tree} | {mib(max(tree)):.1f} | |",
      f"| bwrap tree, largest single process | GNU time %M of bwrap | {max(bw)} {bw} | {mib(max(bw)):.1f} | |",
      f"| corral supervisor, private part | the largest RssAnon seen | {max(sup_anon)} {sup_anon} | {mib(max(sup_anon)):.1f} | |",
      f"| corral-init, private part | the largest RssAnon seen | {max(ini_anon)} {ini_anon} | {mib(max(ini_anon)):.1f} | |",
      "", "VmHWM counts the pages of the corral binary (38 MB, shared in the page cache by every corral process) that "
      "the process touched, most of them by the Go runtime's and the packages' initialisation before main; RssAnon "
      "is the process's own memory."]
text = "\n".join(L) + "\n"
open(out, "w").write(text)
print(text)
PY
log "results written to $out"
