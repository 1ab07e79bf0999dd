#!/usr/bin/env bash
# The Windows lane: the Windows build's tests under Wine (GOOS=windows go
# test -exec scripts/wine/exec) for every package that has tests and builds
# for Windows, then the CLI end to end of corral.exe under Wine (e2e/windows,
# run on the Linux side). Ends with a summary: packages passed and failed,
# the tests skipped as Wine artifacts (each with its reason, from
# internal/wine.SkipArtifact) and the other skips. Exits non-zero if a
# package failed.
#   WINEPREFIX            the prefix (default: scripts/wine/setup.sh's)
#   CORRAL_WINE_LANE_OUT  binaries, the test log (default /tmp/corral-ci/windows-lane)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
WINEPREFIX=$(scripts/wine/setup.sh)
export WINEPREFIX CGO_ENABLED=0
out=${CORRAL_WINE_LANE_OUT:-/tmp/corral-ci/windows-lane}
rm -rf "$out"
mkdir -p "$out"
# The persistent wineserver scripts/wine/exec starts, with Wine's services.
trap 'wineserver -k 2>/dev/null || true' EXIT

# Go's os.RemoveAll under Wine 8 (scripts/wine/overlay.sh): for everything
# built for Windows here.
overlay=$(scripts/wine/overlay.sh "$out/overlay")
echo "windows lane: Go's Deleteat falls back on STATUS_NOT_IMPLEMENTED (Wine 8 lacks FileDispositionInformationEx): -overlay $overlay" >&2
wgo() { GOOS=windows GOARCH=amd64 go "$1" -overlay "$overlay" "${@:2}"; }

# A Unix path as the Windows program sees it (Wine maps Z: to /).
winpath() { printf 'Z:%s' "${1//\//\\}"; }

# The stand-in executor and corral for Windows: there is no go under Wine
# to build them at test time (provider/mxc's tests honour
# CORRAL_TEST_WXCEXEC).
wgo build -o "$out/wxc-exec.exe" ./provider/mxc/testdata/wxcexec
wgo build -o "$out/corral.exe" ./cmd/corral

mapfile -t pkgs < <(GOOS=windows go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' \
	./... ./provider/mxc/testdata/wxcexec | sed '/^$/d')
log=$out/test.json
# Two packages at a time (-p 2): the CI machine has two cores, and a test
# binary under Wine is mostly CPU.
CORRAL_WINE_LANE=1 CORRAL_TEST_WXCEXEC=$(winpath "$out/wxc-exec.exe") \
	wgo test -count=1 -timeout 5m -p 2 -json -exec "$PWD/scripts/wine/exec" "${pkgs[@]}" >"$log" 2>"$out/test.stderr" || true
CORRAL_TEST_WINE=1 CORRAL_WINE_LANE=1 CORRAL_WINE_CORRAL_EXE="$out/corral.exe" CORRAL_WINE_WXCEXEC="$out/wxc-exec.exe" \
	go test -count=1 -timeout 5m -json ./e2e/windows >>"$log" 2>>"$out/test.stderr" || true

# A package that failed runs once more: Wine 8 fails now and then where
# Windows would not (CreateProcess "Internal error.", a service holding a
# pipe open). A pass on the retry counts, and the summary lists the
# package with its first failure, so a flaky Windows bug stays visible.
retry=$out/retry.json
: >"$retry"
mapfile -t again < <(python3 - "$log" <<'EOF'
import json, sys
res = {}
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    pkg = ev.get("Package") or ev.get("ImportPath", "")
    if ev.get("Test") is None and ev.get("Action") in ("pass", "fail", "skip", "build-fail") and pkg:
        res[pkg] = ev["Action"]
for p, a in res.items():
    if a in ("fail", "build-fail"):
        print(p)
EOF
)
winagain=() e2eagain=()
for p in "${again[@]}"; do
	case $p in
	"") ;;
	*/e2e/windows) e2eagain+=("$p") ;;
	*) winagain+=("$p") ;;
	esac
done
if [ ${#winagain[@]} -gt 0 ]; then
	CORRAL_WINE_LANE=1 CORRAL_TEST_WXCEXEC=$(winpath "$out/wxc-exec.exe") \
		wgo test -count=1 -timeout 5m -json -exec "$PWD/scripts/wine/exec" "${winagain[@]}" >>"$retry" 2>>"$out/test.stderr" || true
fi
if [ ${#e2eagain[@]} -gt 0 ]; then
	CORRAL_TEST_WINE=1 CORRAL_WINE_LANE=1 CORRAL_WINE_CORRAL_EXE="$out/corral.exe" CORRAL_WINE_WXCEXEC="$out/wxc-exec.exe" \
		go test -count=1 -timeout 5m -json ./e2e/windows >>"$retry" 2>>"$out/test.stderr" || true
fi

# The MSI step (packaging/msi/wine-test.sh, docs/install-windows.md): MSIs
# of v1.0.0 and v2.0.0 built with Debian's wixl, installed, upgraded, a
# downgrade refused and uninstalled with Wine's msiexec in a copy of the
# prefix, checking the files, `corral version` (by path and through PATH),
# the Add/Remove Programs entry, the UpgradeCode registration and the
# system PATH. Its WINE ARTIFACT lines are where Wine's msi.dll is not
# Windows Installer: noted, never counted as passes.
msi_rc=0
packaging/msi/wine-test.sh "$out/msi" | tee "$out/msi.log" || msi_rc=$?

python3 - "$log" "$((SECONDS - start))" "$retry" <<'EOF'
import json, sys
from collections import defaultdict

ARTIFACT = "Wine artifact: "  # internal/wine.ArtifactPrefix
log, secs, retry = sys.argv[1], sys.argv[2], sys.argv[3]
output = defaultdict(list)  # (package, test) -> output lines
result = {}                 # package -> pass | fail | skip
skips = []                  # (package, test, reason)
rerun = {}                  # package -> the retry's pass | fail | skip
for line in open(retry, encoding="utf-8", errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    pkg = ev.get("Package") or ev.get("ImportPath", "")
    if ev.get("Test") is None and ev.get("Action") in ("pass", "fail", "skip") and pkg:
        rerun[pkg] = ev["Action"]
for line in open(log, encoding="utf-8", errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    pkg, test, act = ev.get("Package") or ev.get("ImportPath", ""), ev.get("Test"), ev.get("Action")
    if act in ("output", "build-output"):
        output[(pkg, test)].append(ev.get("Output", ""))
    elif act in ("pass", "fail", "skip") and test is None and pkg:
        result[pkg] = act
    elif act == "build-fail":
        result[pkg] = "fail"
    elif act == "skip" and test:
        reason = ""
        for out in output[(pkg, test)]:
            msg = out.strip()
            # "file_test.go:12: reason" (the skip's own line)
            if ": " in msg and not msg.startswith(("=== ", "--- ")):
                reason = msg.split(": ", 1)[1]
                if reason.startswith(ARTIFACT):
                    break
        skips.append((pkg, test, reason))

flaky = []  # (package, failed tests, a failure line): failed, then passed on the retry
for p, r in list(result.items()):
    if r == "fail" and rerun.get(p) in ("pass", "skip"):
        tests = sorted({t for (q, t), outs in output.items() if q == p and t and any(o.lstrip().startswith("--- FAIL") for o in outs)})
        why = next((o.strip() for t in tests for o in output[(p, t)] if ".go:" in o), "")
        flaky.append((p, tests, why))
        result[p] = rerun[p]
failed = sorted(p for p, r in result.items() if r == "fail")
passed = sum(1 for r in result.values() if r in ("pass", "skip"))
short = lambda p: p.removeprefix("github.com/corral-sandbox/corral/")
for p in failed:
    print(f"--- FAIL {short(p)}")
    for out in output[(p, None)][-40:]:
        sys.stdout.write("    " + out)
    for (q, t), outs in output.items():
        if q == p and t and any(o.lstrip().startswith("--- FAIL") for o in outs):
            print(f"    {t}:")
            for o in outs[-20:]:
                sys.stdout.write("      " + o)
if flaky:
    print(f"{len(flaky)} packages failed under Wine, then passed when run again:")
    for p, tests, why in flaky:
        print(f"  {short(p)} {', '.join(tests)}: {why[:300]}")
art = [s for s in skips if s[2].startswith(ARTIFACT)]
other = [s for s in skips if not s[2].startswith(ARTIFACT)]
print(f"windows lane: {passed} packages passed, {len(failed)} failed; "
      f"{len(art)} tests skipped as Wine artifacts{':' if art else ''}")
for p, t, r in art:
    print(f"  {short(p)} {t}: {r[len(ARTIFACT):]}")
if other:
    # One line per package and reason: a whole package skipped for one
    # reason (consent on Windows) is one line.
    by = defaultdict(list)
    for p, t, r in other:
        by[(short(p), r)].append(t)
    print(f"{len(other)} other skips:")
    for (p, r), ts in by.items():
        print(f"  {p} {ts[0] if len(ts) == 1 else f'({len(ts)} tests)'}: {r}")
print(f"windows lane: {secs} s")
sys.exit(1 if failed or not result else 0)
EOF
# The MSI step's outcome again, next to the summary.
grep -E '^msi: (FAIL|SKIP|WINE ARTIFACT)|^msi: [0-9]+ checks passed' "$out/msi.log" || true
[ "$msi_rc" = 0 ] || { echo "windows lane: the MSI step failed ($out/msi.log)"; exit 1; }
