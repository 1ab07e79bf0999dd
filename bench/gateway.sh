#!/usr/bin/env bash
# Load on corral gateway, in one run: sandboxes created, exec'd once and
# deleted concurrently through one gateway, LEVELS at once (default 1 8
# 100), on each of PROVIDERS (default docker linux: a provider the gateway
# refuses is reported "not available: <the gateway's reason>", not a
# failure), at least SAMPLES sandboxes per level and provider (default 100:
# 100 rounds of 1, 13 of 8, 2 of 100, after one warm-up round at the
# level). Each level is one run of e2e's TestGatewayLoad (a gateway of its
# own, serving linux and docker), which checks after every round that
# nothing of the round's sandboxes is left — store rows, containers, state
# dirs, output logs, cgroups, processes — and over the level's rounds that
# the gateway's fds (/proc/PID/fd) did not grow with the sandboxes.
#
# The baselines, in the same run (BASELINE=0 leaves them out): for docker,
# the same cycle on plain Docker through its API (no corral), a round after
# each gateway round; for linux, one-shot sandboxes at the same level right
# after the gateway's rounds: `corral run -C DIR -- true` (the same binary
# and default policy, a DIR per run of a round) and, if bwrap is installed, `bwrap --unshare-all
# --die-with-parent --ro-bind / / --dev /dev --proc /proc true`, each timed
# from its start to its exit, in rounds of LEVEL at once (a warm-up round,
# then as many rounds as the gateway's). A managed linux sandbox's create +
# first exec is put against one such run: it does what a one-shot run does
# but the teardown.
#
# After each level, for linux, this script checks what the level left on
# the machine (waiting up to 5 s for it to go): `__corral_persist`
# supervisors and state dirs of this run (its linux sandboxes keep their
# state under a directory of their own, CORRAL_LINUX_STATE_DIR, so that
# others' sandboxes on the machine are not counted), and cgroups
# corral-<id> under a corral cgroup parent that were not there before the
# level (the one-shot runs' too), but those of another's live persistent
# sandbox (/run/corral/sandboxes/<id>) or with only another's processes in
# them (not below this script or one of its supervisors).
#
# Reports create, first exec, delete and create+exec+delete per sandbox,
# p50 / p99, with the ratios against one at once and against the
# baselines, the one-shot runs, and the medians of each docker step from
# the daemon's events, into bench/results/gateway-<date>.md and stdout.
# Needs root and a Docker daemon with corral/base:1 (corral image
# build-base). Exits 1 when a test failed, a `corral run` failed or
# something was left, after writing what it measured (bwrap's failures are
# counted, not failed on: it fails when a mount under / goes while it binds
# them, as Docker's do under load).
set -euo pipefail
export LC_ALL=C
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
work=$(mktemp -d /tmp/gateway-bench.XXXXXX)
base=/run/corral/bench-gateway-$$ # the linux sandboxes' state dirs (CORRAL_LINUX_STATE_DIR)
trap 'rm -rf "$work"; rmdir "$base" 2>/dev/null || true' EXIT
start=$(date -Iseconds)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
status=0
CGO_ENABLED=0 go build -o "$work/corral" ./cmd/corral
chmod 0755 "$work" # the sandboxes reach their workdirs through it
linux=0
[[ " $providers " == *" linux "* ]] && linux=1
bwrap=$(command -v bwrap || true)
oneshot=0
[ "$linux" = 1 ] && [ "$baseline" = 1 ] && oneshot=1

# ms D: "54 ms" or "28.8 s" (fmtLoadDur's forms) in ms; fmt MS: back.
awklib='function ms(x) { gsub(/^ +| +$/, "", x); split(x, a, " "); return a[2] == "s" ? a[1] * 1000 : a[1] + 0 }
function fmt(m) { return m < 10000 ? sprintf("%d ms", m) : sprintf("%.1f s", m / 1000) }
function ratio(a, b) { return (a == "" || b == "" || b <= 0) ? "–" : sprintf("×%.2f", a / b) }'

# section NAME FILE: the lines of "## NAME" in a report of the test.
section() { awk -v s="## $1" '$0 == s { on = 1; next } /^## / { on = 0 } on' "$2"; }

# cgroups: corral's sandbox cgroups on the machine, under a corral parent
# on any hierarchy: corral-<id> (a persistent sandbox's) and
# run-<pid>-<rand> (a one-shot run's).
cgroups() {
	find /sys/fs/cgroup -mindepth 2 -maxdepth 8 -type d -regextype posix-extended \
		-regex '.*/corral/(corral-[0-9a-f]{12}|run-[0-9]+-[0-9a-f]+)' 2>/dev/null | sort || true
}

# run_oneshot KIND N FILE: N one-shot sandboxes of KIND (run, bwrap) at
# once, each in a workdir of its own (runs sharing one would see each
# other's placeholders as planted); each appends "µs exit-status" to FILE,
# and a failed one its stderr's first line to oneshot.KIND.err.
run_oneshot() {
	local kind=$1 n=$2 f=$3 i
	for ((i = 0; i < n; i++)); do
		{
			rc=0
			mkdir -p "$work/wd.$i"
			t1=$EPOCHREALTIME
			if [ "$kind" = run ]; then
				"$work/corral" run -C "$work/wd.$i" -- true >/dev/null 2>"$work/err.$kind.$i" || rc=$?
			else
				"$bwrap" --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true >/dev/null 2>"$work/err.$kind.$i" || rc=$?
			fi
			t2=$EPOCHREALTIME
			echo "$((${t2//[.,]/} - ${t1//[.,]/})) $rc" >>"$f"
			if [ "$rc" != 0 ]; then echo "exit $rc: $(head -1 "$work/err.$kind.$i")" >>"$work/oneshot.$kind.err"; fi
		} &
	done
	wait
}

# stats N FILE: "N runs p50 p99 failed" (ms, nearest rank) of the runs
# that succeeded.
stats() {
	local bad
	bad=$(awk '$2 != 0' "$2" | wc -l)
	awk '$2 == 0 { print $1 }' "$2" | sort -n | awk -v n="$1" -v bad="$bad" '{ v[NR] = $1 }
		END { if (NR == 0) { print n, 0, 0, 0, bad; exit }
			printf "%d %d %.0f %.0f %d\n", n, NR, v[int((50 * NR + 99) / 100)] / 1000, v[int((99 * NR + 99) / 100)] / 1000, bad }'
}

# whose PID: "ours" (below this script, or below a supervisor of this
# run's), "orphan" (its parent is pid 1, so nothing tells whose it is) or
# "another's" (below another's supervisor or process tree).
whose() {
	local p=$1 stat cmd hops=0 f
	while [ "$p" -gt 1 ]; do
		if [ "$p" = $$ ]; then echo ours; return; fi
		cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || { echo gone; return; }
		if [[ $cmd == *__corral_persist* ]]; then
			if [[ $cmd == *"$base/"* ]]; then echo ours; else echo "another's"; fi
			return
		fi
		stat=$(cat 2>/dev/null "/proc/$p/stat") || { echo gone; return; }
		read -ra f <<<"${stat##*) }"
		p=${f[1]}
		hops=$((hops + 1))
	done
	if [ "$hops" -le 1 ]; then echo orphan; else echo "another's"; fi
}

# leftovers LEVEL: what of this run is on the machine after the level: its
# supervisors and state dirs, and the corral-<id> cgroups made since the
# level started that are still there, but those of another's live
# persistent sandbox or with only another's processes in them (an empty one
# is counted: nothing tells whose it was).
leftovers() {
	local p cmd d c id procs w mine
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		if [[ $cmd == *__corral_persist*"$base/"* ]]; then echo "process ${p#/proc/} ($cmd)"; fi
	done
	for d in "$base"/*; do
		if [ -e "$d" ]; then echo "state dir $d"; fi
	done
	cgroups | comm -13 "$work/cgroups.$1" - | while read -r c; do
		id=${c##*/}
		if [ -d "/run/corral/sandboxes/$id" ]; then continue; fi # another's live sandbox
		procs=$(cat 2>/dev/null "$c/cgroup.procs") || continue  # gone meanwhile
		mine=0
		[ -n "$procs" ] || mine=1
		for p in $procs; do
			w=$(whose "$p")
			if [ "$w" = ours ] || [ "$w" = orphan ]; then mine=1; fi
		done
		if [ "$mine" = 1 ]; then
			echo "cgroup $c (processes: $(for p in $procs; do echo "$p $(whose "$p") $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")"; done | tr '\n' ';'))"
		fi
	done
}

for n in $levels; do
	rounds=$(((samples + n - 1) / n))
	[ "$rounds" -ge 2 ] || rounds=2
	cgroups >"$work/cgroups.$n"
	s=0
	CGO_ENABLED=0 CORRAL_TEST_DOCKER=1 CORRAL_E2E_BIN="$work/corral" CORRAL_LINUX_STATE_DIR="$base" \
		CORRAL_GATEWAY_LOAD="$n" CORRAL_GATEWAY_PROVIDERS="$providers" CORRAL_GATEWAY_SAMPLES="$samples" \
		CORRAL_GATEWAY_BASELINE="$baseline" CORRAL_GATEWAY_REPORT="$work/report.$n" \
		go test -count=1 -v -timeout 90m -run 'TestGatewayLoad$' ./e2e >"$work/log.$n" 2>&1 || s=$?
	[ -f "$work/report.$n" ] || : >"$work/report.$n"
	echo "$s" >"$work/status.$n"
	if [ "$s" != 0 ]; then status=1; fi
	if [ "$oneshot" = 1 ]; then
		kinds=run
		[ -z "$bwrap" ] || kinds="run bwrap"
		for k in $kinds; do run_oneshot "$k" "$n" /dev/null; done # warm-up
		for ((r = 1; r <= rounds; r++)); do
			for k in $kinds; do run_oneshot "$k" "$n" "$work/oneshot.$k.$n"; done
		done
		for k in $kinds; do
			stats "$n" "$work/oneshot.$k.$n" >>"$work/data.$k"
			# corral's failures fail the bench; bwrap's are reported (it
			# fails when a mount under / goes while it binds them).
			if [ "$k" = run ] && [ "$(tail -1 "$work/data.$k" | cut -d' ' -f5)" != 0 ]; then status=1; fi
		done
	fi
	if [ "$linux" = 1 ]; then
		end=$((SECONDS + 5))
		while left=$(leftovers "$n") && [ -n "$left" ] && [ "$SECONDS" -lt "$end" ]; do sleep 0.2; done
		printf '%s\n' "$left" | sed '/^$/d' >"$work/left.$n"
		if [ -s "$work/left.$n" ]; then status=1; fi
		others=0
		for p in /proc/[0-9]*; do
			cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
			if [[ $cmd == *__corral_persist* && $cmd != *"$base/"* ]]; then others=$((others + 1)); fi
		done
		echo "$others" >"$work/others.$n"
	fi
	# The gateway's table rows, by provider (plain: plain Docker), as
	# "N sandboxes c50 c99 e50 e99 d50 d99 t50 t99" in ms.
	for p in $providers plain; do
		name=$p
		[ "$p" != plain ] || name="plain Docker (the baseline)"
		section "$name" "$work/report.$n" >"$work/sec.$p.$n"
		awk -F'|' "$awklib"'
			/^\| [0-9]/ { printf "%d %d", $2, $3; for (i = 4; i <= 7; i++) { split($i, d, "/"); printf " %d %d", ms(d[1]), ms(d[2]) } print "" }' \
			"$work/sec.$p.$n" >>"$work/data.$p"
	done
	section "Where the time goes" "$work/report.$n" | grep -E '^\| (docker|plain) \|' >>"$work/steps" || true
done

# table P: P's rows, with "total vs 1 at once" across the levels, and
# against plain Docker (docker) or the one-shot runs (linux).
table() {
	local p=$1
	if [ "$p" = linux ]; then
		echo "| at once | sandboxes | create p50 / p99 | first exec p50 / p99 | delete p50 / p99 | total p50 / p99 | total vs 1 at once | create + first exec p50 | create + first exec vs \`corral run\` | create + first exec vs bwrap | total vs \`corral run\` |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|"
	else
		echo "| at once | sandboxes | create p50 / p99 | first exec p50 / p99 | delete p50 / p99 | total p50 / p99 | total vs 1 at once | total vs plain Docker |"
		echo "|---|---|---|---|---|---|---|---|"
	fi
	local refs=("$work/data.plain" "$work/data.run" "$work/data.bwrap")
	[ "$p" != plain ] || refs=()
	awk -v p="$p" -v rows="$work/data.$p" "$awklib"'
		FILENAME == rows { if ($1 == 1 && !(1 in one)) one[1] = $9 " " $10; row[++k] = $0; next }
		FILENAME ~ /data\.plain$/ { plain[$1] = $9 " " $10; next }
		FILENAME ~ /data\.run$/ { run[$1] = $3 " " $4; next }
		FILENAME ~ /data\.bwrap$/ { bw[$1] = $3; next }
		END { for (j = 1; j <= k; j++) {
			split(row[j], f, " ")
			vs1 = "–"
			if (f[1] != 1 && (1 in one)) { split(one[1], o, " "); vs1 = ratio(f[9], o[1]) " / " ratio(f[10], o[2]) }
			printf "| %d | %d | %s / %s | %s / %s | %s / %s | %s / %s | %s |", f[1], f[2], fmt(f[3]), fmt(f[4]), fmt(f[5]), fmt(f[6]), fmt(f[7]), fmt(f[8]), fmt(f[9]), fmt(f[10]), vs1
			if (p == "linux") {
				ce = f[3] + f[5]
				vr = "–"; vb = "–"; vt = "–"
				if (f[1] in run) { split(run[f[1]], r, " "); vr = ratio(ce, r[1]); vt = ratio(f[9], r[1]) " / " ratio(f[10], r[2]) }
				if (f[1] in bw) vb = ratio(ce, bw[f[1]])
				printf " %s | %s | %s | %s |\n", fmt(ce), vr, vb, vt
			} else if (p == "plain") {
				print " – |"
			} else {
				vp = "–"
				if (f[1] in plain) { split(plain[f[1]], q, " "); vp = ratio(f[9], q[1]) " / " ratio(f[10], q[2]) }
				printf " %s |\n", vp
			}
		} }' "${refs[@]}" "$work/data.$p"
}

# oneshot_table: the one-shot linux runs by level.
oneshot_table() {
	echo "| at once | runs (failed) | \`corral run -- true\` p50 / p99 | vs 1 at once | bwrap runs (failed) | bwrap p50 / p99 | vs 1 at once | \`corral run\` vs bwrap |"
	echo "|---|---|---|---|---|---|---|---|"
	awk "$awklib"'
		FILENAME ~ /data\.bwrap$/ { bw[$1] = $0; next }
		{ row[++k] = $0 }
		END { for (j = 1; j <= k; j++) {
			split(row[j], r, " ")
			if (r[1] == 1) { r1 = r[3]; r99 = r[4] }
			if (r[1] == 1 && (1 in bw)) { split(bw[1], b, " "); b1 = b[3]; b99 = b[4] }
			vs1 = (r[1] != 1 && r1 != "") ? ratio(r[3], r1) " / " ratio(r[4], r99) : "–"
			bn = "–"; bs = "not installed"; bvs1 = "–"; rb = "–"
			if (r[1] in bw) {
				split(bw[r[1]], b, " ")
				bn = b[2] " (" b[5] ")"
				bs = b[2] ? fmt(b[3]) " / " fmt(b[4]) : "all failed"
				if (r[1] != 1 && b1 != "") bvs1 = ratio(b[3], b1) " / " ratio(b[4], b99)
				rb = ratio(r[3], b[3]) " / " ratio(r[4], b[4])
			}
			rs = r[2] ? fmt(r[3]) " / " fmt(r[4]) : "all failed"
			printf "| %d | %d (%d) | %s | %s | %s | %s | %s | %s |\n", r[1], r[2], r[5], rs, vs1, bn, bs, bvs1, rb
		} }' "$work/data.bwrap" "$work/data.run"
}

touch "$work/data.plain" "$work/data.run" "$work/data.bwrap" "$work/steps"
{
	echo "# corral gateway load, $start"
	echo
	echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (work tree modified)'), $(nproc) CPUs, kernel $(uname -r), $(docker version --format 'Docker {{.Server.Version}}' 2>/dev/null), cgroups $(docker info --format '{{.CgroupDriver}} v{{.CgroupVersion}}' 2>/dev/null)$([ -z "$bwrap" ] || echo ", $("$bwrap" --version 2>/dev/null)"); load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(($(date +%s) - t0)) s"
	echo
	echo "\`LEVELS='$levels' PROVIDERS='$providers' SAMPLES=$samples BASELINE=$baseline bench/gateway.sh\`: per sandbox, create (until ready), its first exec (\`echo N\`, until its exit status) and delete (until answered), each sandbox's calls in sequence and the sandboxes of a round at once; p50 / p99 by nearest rank; ratios are p50 / p99 against the same provider one at a time and against the baseline at the same level. Each level is a gateway of its own (\`corral gateway serve\`, linux and docker) after a warm-up round at that level."
	for p in $providers; do
		echo
		echo "## $p"
		echo
		sec=$(cat "$work"/sec."$p".* 2>/dev/null || true)
		if why=$(grep -m1 '^not available: ' <<<"$sec"); then
			echo "$why"
			continue
		fi
		if [ ! -s "$work/data.$p" ]; then
			echo "failed (see the test's output)"
			continue
		fi
		table "$p"
		if [ "$p" = linux ]; then
			echo
			echo "\"create + first exec\" is the sum of the two p50s; a one-shot run (below) makes a sandbox, runs \`true\` in it and tears it down."
		fi
		echo
		echo "Left behind (the test, after every round: store rows, containers, state dirs, output logs, cgroups, processes; the gateway's fds over the level's rounds):"
		echo
		for n in $levels; do
			l=$(grep -m1 '^Left behind' "$work/sec.$p.$n" 2>/dev/null | sed 's/^Left behind, checked/checked/' || true)
			echo "- $n at once: ${l:-no report (the test failed: exit $(cat "$work/status.$n"))}"
		done
		if [ "$p" = linux ]; then
			echo
			echo "Left on the machine after each level (this script: \`__corral_persist\` supervisors and state dirs under this run's CORRAL_LINUX_STATE_DIR, sandbox cgroups under a corral cgroup parent — corral-<id>, and run-<pid>-… of the one-shot runs — that were not there before the level, but those with only others' processes in them):"
			echo
			for n in $levels; do
				if [ -s "$work/left.$n" ]; then
					echo "- $n at once: **$(wc -l <"$work/left.$n") left**: $(head -10 "$work/left.$n" | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
				else
					echo "- $n at once: nothing ($(cat "$work/others.$n") \`__corral_persist\` of others on the machine, not counted)"
				fi
			done
			d=$(awk '$1 == 1 { print $3 + $5 }' "$work/data.linux")
			c=$(awk '$1 == 100 { print $3 }' "$work/data.linux")
			targets=()
			[ -z "$d" ] || targets+=("1 at once, create + first exec p50 < 100 ms: $d ms, $([ "$d" -lt 100 ] && echo met || echo '**missed**')")
			[ -z "$c" ] || targets+=("100 at once, create p50 < 2 s: $(awk -v m="$c" "$awklib"' BEGIN { print fmt(m) }'), $([ "$c" -lt 2000 ] && echo met || echo '**missed**')")
			if [ "${#targets[@]}" -gt 0 ]; then
				echo
				echo "Targets: $(printf '%s; ' "${targets[@]}" | sed 's/; $//')."
			fi
		fi
	done
	if [ "$baseline" = 1 ]; then
		echo
		echo "## plain Docker (the baseline for docker)"
		echo
		echo "The same cycle without corral, through the Docker API: create + start \`corral/base:1\` running \`sleep\` (network none), exec \`echo N\` (create, attach, read to the end, inspect), remove (forced); a round after each gateway round."
		echo
		table plain
	fi
	if [ "$oneshot" = 1 ]; then
		echo
		echo "## one-shot linux runs (the baseline for linux)"
		echo
		echo "Right after each level's gateway rounds, the same number of rounds of LEVEL at once, after a warm-up round: \`corral run -C DIR -- true\` (this binary, the default policy, a DIR of its own per run of a round) and $([ -n "$bwrap" ] && echo "\`bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true\`" || echo "bwrap (not installed here)"), a round of each in turn, each run timed from its start to its exit."
		echo
		oneshot_table
		for k in run bwrap; do
			if [ -s "$work/oneshot.$k.err" ]; then
				echo
				echo "Failed $k runs (p50 / p99 are of the others): $(sort "$work/oneshot.$k.err" | uniq -c | sort -rn | head -3 | sed 's/^ *//' | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
			fi
		done
	fi
	if [ -s "$work/steps" ]; then
		echo
		echo "## Where the time goes (docker)"
		echo
		echo "Medians of each step, split at the daemon's events for the sandbox's container (\`create\`, \`start\`, \`exec_create\`, \`exec_die\`, \`kill\`, \`destroy\`):"
		echo
		echo "| | at once | → created | created → started | started → create answered | → exec created | exec created → died | died → exec answered | → kill | kill → destroyed | destroyed → delete answered |"
		echo "|---|---|---|---|---|---|---|---|---|---|---|"
		grep '^| docker |' "$work/steps" || true
		grep '^| plain |' "$work/steps" || true
	fi
	for n in $levels; do
		s=$(cat "$work/status.$n")
		if [ "$s" != 0 ]; then
			echo
			echo "## The test failed at $n at once (exit $s)"
			echo
			echo '```'
			grep -E -- '--- FAIL|left behind|grew from|: (create|exec|delete|remove) [0-9]+:|panic|FAIL' "$work/log.$n" | head -50 || true
			echo '```'
		fi
	done
} >"$out"
cat "$out"
if [ "$status" != 0 ]; then
	for n in $levels; do
		if [ "$(cat "$work/status.$n")" != 0 ]; then tail -100 "$work/log.$n" >&2; fi
	done
	exit 1
fi
