#!/usr/bin/env bash
# Compatibility of network.unix_sockets: deny (docs/unix-sockets.md).
#
# Runs common developer workloads inside `corral run` on the built-in default
# policy twice, once with network.unix_sockets: deny and once with allow, each
# in a fresh copy of a small fixture workdir, offline (network none, the
# default), and prints a Markdown table: workload, the command, the result
# with deny and with allow (ok, or the exit status and the last line of
# stderr). Nothing is fetched from a registry.
#
# Usage: bench/unix-sockets-compat.sh [CORRAL_BINARY]
#   default: builds ./cmd/corral (CGO_ENABLED=0) into a temp dir.
# Environment: PROVIDER (default linux; docker needs python3/node/git/... in
# its image, which the busybox base image has not).
#
# A workload whose tool is not installed is reported "skipped".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
tmp=$(mktemp -d /tmp/corral-unix-compat-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
corral=${1:-}
if [ -z "$corral" ]; then
	(cd "$repo" && CGO_ENABLED=0 go build -o "$tmp/corral" ./cmd/corral) || exit 1
	corral=$tmp/corral
fi
provider=${PROVIDER:-linux}

# ---- the fixture ----
fx=$tmp/fixture
mkdir -p "$fx/npmpkg" "$fx/pypkg/corralprobe" "$fx/wheels"
cat >"$fx/mp.py" <<'EOF'
import multiprocessing as mp, sys

def sq(x):
    return x * x

def put(q):
    q.put("hello")

def fill(d):
    d["k"] = "v"

if __name__ == "__main__":
    what = sys.argv[1]
    if what in ("fork", "spawn", "forkserver"):
        mp.set_start_method(what)
        with mp.Pool(2) as p:
            assert p.map(sq, range(5)) == [0, 1, 4, 9, 16]
    elif what == "queue":
        q = mp.Queue()
        p = mp.Process(target=put, args=(q,))
        p.start()
        assert q.get(timeout=10) == "hello"
        p.join()
    elif what == "manager":
        with mp.Manager() as m:
            d = m.dict()
            p = mp.Process(target=fill, args=(d,))
            p.start()
            p.join()
            assert d["k"] == "v"
    elif what == "futures":
        import concurrent.futures as cf
        with cf.ProcessPoolExecutor(2) as ex:
            assert list(ex.map(sq, range(3))) == [0, 1, 4]
    elif what == "asyncio":
        import asyncio
        async def main():
            p = await asyncio.create_subprocess_exec("sh", "-c", "echo hi", stdout=asyncio.subprocess.PIPE)
            out, _ = await p.communicate()
            assert out == b"hi\n"
        asyncio.run(main())
    print("ok", what)
EOF
cat >"$fx/ipc.js" <<'EOF'
const { fork, spawn } = require('child_process');
if (process.argv[2] === 'child') {
  process.on('message', (m) => { process.send({ echo: m }); process.disconnect(); });
} else {
  const c = fork(__filename, ['child']);
  c.on('message', (m) => {
    if (m.echo !== 'ping') { console.error('bad echo', m); process.exit(1); }
    const s = spawn(process.execPath, [__filename, 'child'], { stdio: ['pipe', 'inherit', 'inherit', 'ipc'] });
    s.on('message', (m2) => { console.log('ok fork and spawn ipc', m.echo, m2.echo); });
    s.send('pong');
  });
  c.send('ping');
}
EOF
cat >"$fx/Makefile" <<'EOF'
T := $(addprefix out/,a b c d e f g h)
all: $(T)
	@ls out | wc -l
out/%:
	@mkdir -p out && sleep 0.2 && echo $* > $@
EOF
cat >"$fx/hello.go" <<'EOF'
package main

import "fmt"

func main() { fmt.Println("ok go") }
EOF
cat >"$fx/pypkg/pyproject.toml" <<'EOF'
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "corralprobe"
version = "0.1"
EOF
echo 'VALUE = 1' >"$fx/pypkg/corralprobe/__init__.py"
echo '{"name": "corral-probe-pkg", "version": "1.0.0", "main": "index.js"}' >"$fx/npmpkg/package.json"
echo 'module.exports = 1;' >"$fx/npmpkg/index.js"
# The wheel is written here by hand (a zip with its dist-info), so making
# it needs no setuptools and no index.
if command -v python3 >/dev/null; then
	python3 - "$fx/wheels/corralwheel-0.1-py3-none-any.whl" <<'PYEOF'
import base64, hashlib, sys, zipfile
files = {
    "corralwheel/__init__.py": "VALUE = 2\n",
    "corralwheel-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: corralwheel\nVersion: 0.1\n",
    "corralwheel-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: corral\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def digest(s):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(s.encode()).digest()).rstrip(b"=").decode()
record = "".join(f"{n},{digest(c)},{len(c.encode())}\n" for n, c in files.items())
record += "corralwheel-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for n, c in files.items():
        z.writestr(n, c)
    z.writestr("corralwheel-0.1.dist-info/RECORD", record)
PYEOF
fi

# ---- the workloads: name | tool that must exist | shell command ----
workloads=(
	"python3 multiprocessing Pool (fork, the default before 3.14)|python3|python3 mp.py fork"
	"python3 multiprocessing Pool (spawn)|python3|python3 mp.py spawn"
	"python3 multiprocessing Pool (forkserver, the default from 3.14)|python3|python3 mp.py forkserver"
	"python3 multiprocessing Queue + Process|python3|python3 mp.py queue"
	"python3 multiprocessing Manager|python3|python3 mp.py manager"
	"python3 concurrent.futures ProcessPoolExecutor|python3|python3 mp.py futures"
	"python3 asyncio subprocess|python3|python3 mp.py asyncio"
	"node child_process fork / spawn with ipc|node|node ipc.js"
	"git init, add, commit, log, status|git|git init -q repo && cd repo && echo hi >f && git add f && git -c user.name=a -c user.email=a@example.invalid commit -qm init && git log --oneline && git status --short"
	"npm init -y, npm pack (offline)|npm|cd npmpkg && npm init -y >/dev/null && npm pack --offline --no-update-notifier"
	"pip --version, pip list|pip|pip --version && pip list >/dev/null && echo ok"
	"pip install a local wheel (venv, --no-index)|pip|ls wheels/*.whl >/dev/null && python3 -m venv v && v/bin/pip install -q --no-index wheels/*.whl && v/bin/python -c 'import corralwheel' && v/bin/pip list | grep corralwheel"
	"pip install a local source dir (--no-index --no-build-isolation)|pip|python3 -m venv --system-site-packages v && v/bin/pip install -q --no-index --no-build-isolation ./pypkg && v/bin/python -c 'import corralprobe; print(\"ok\")'"
	"make -j4 (8 jobs)|make|make -j4"
	"go build (hello world)|go|GOTOOLCHAIN=local go build -o hello hello.go && ./hello"
	"tmux new-session -d, ls, kill-server|tmux|export SHELL=/bin/sh; tmux new-session -d -s t 'sleep 30' && tmux ls && tmux kill-server"
	"ssh-agent, ssh-add -l|ssh-agent|a=\$(ssh-agent -s) && eval \"\$a\" >/dev/null && { ssh-add -l; test \$? -eq 1; }; r=\$?; [ -z \"\${SSH_AGENT_PID:-}\" ] || ssh-agent -k >/dev/null; exit \$r"
	"gpg --quick-gen-key (gpg-agent)|gpg|gpg -q --batch --passphrase '' --quick-gen-key 'x <x@example.invalid>' ed25519 sign never && gpg --list-secret-keys | grep -q x@example.invalid"
)

policy() { # $1: deny|allow
	printf 'version: 1\nnetwork:\n  unix_sockets: %s\n' "$1" >"$tmp/policy-$1.yaml"
	# Cgroups are often not delegated to a user (cgroup v1 never is).
	if [ "$(id -u)" != 0 ]; then
		printf 'layers:\n  cgroups: optional\n' >>"$tmp/policy-$1.yaml"
	fi
	echo "$tmp/policy-$1.yaml"
}
pol_deny=$(policy deny)
pol_allow=$(policy allow)

run_one() { # $1 policy, $2 command; prints the result cell
	local work out code
	work=$(mktemp -d "$tmp/work-XXXXXX")
	cp -a "$fx/." "$work/"
	chmod -R a+rwX "$work" # a root caller's workload runs as nobody
	out=$("$corral" run --provider "$provider" --policy "$1" -C "$work" -- sh -c "$2" 2>&1 </dev/null)
	code=$?
	rm -rf "$work"
	if [ $code -eq 0 ]; then
		echo "ok"
	else
		last=$(printf '%s\n' "$out" | grep -v '^\s*$' | tail -1 | cut -c1-140 | sed 's/|/\\|/g')
		echo "fails (exit $code: \`$last\`)"
	fi
}

echo "corral: $("$corral" version 2>/dev/null | head -1); provider $provider; $(uname -sr); uid $(id -u)"
echo
echo "| workload | command | unix_sockets: deny | unix_sockets: allow |"
echo "|---|---|---|---|"
for w in "${workloads[@]}"; do
	IFS='|' read -r name tool cmd <<<"$w"
	if ! command -v "$tool" >/dev/null; then
		echo "| $name | \`$cmd\` | skipped ($tool not installed) | skipped |"
		continue
	fi
	d=$(run_one "$pol_deny" "$cmd")
	a=$(run_one "$pol_allow" "$cmd")
	printf '| %s | `%s` | %s | %s |\n' "$name" "$(printf '%s' "$cmd" | sed 's/|/\\|/g')" "$d" "$a"
done
