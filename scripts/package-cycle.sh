#!/usr/bin/env bash
# The Debian package's life, end to end, as root on a Debian machine
# (.ci/run runs it; docs/install.md is what it checks):
#   build 0.0.0~ci1 and 0.0.0~ci2 (packaging/deb/build.sh); scan
#   (packaging/scan) for a baseline; dpkg -i ci1; README's first command
#   through /usr/bin/corral in a git repository; a service (sleep, with
#   autostart) and the gateway with a linux sandbox; dpkg -i ci2: the
#   service and the gateway keep running on the old binary, `corral
#   version` says ci2, a service restart moves to the new one; dpkg -r is
#   refused while they run, naming each; stopped, dpkg -r keeps the state
#   and disables autostart; a reinstall enables it again; dpkg -P; the
#   scan finds nothing the package owns and nothing new (what the machine
#   had before, and what other corral binaries at work come and go with,
#   aside: corral-scan -baseline -recheck).
# It leaves what the rest of CI uses alone (/tmp/corral-ci/corral, the
# corral-test user, the corral/base image) and cleans up after a run that
# failed part way, so it can run again. Work files: /tmp/corral-ci/package.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=0
[ "$(id -u)" = 0 ] || { echo "package-cycle: run as root" >&2; exit 1; }
for v in $(env | sed -n 's/^\(CORRAL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done # the package's default paths

work=/tmp/corral-ci/package
corral=/usr/bin/corral
svc=pkgcycle
sock=/run/corral/gateway.sock
step() { printf '== package-cycle: %s (%ds)\n' "$*" "$SECONDS"; }
fail() {
	echo "package-cycle: FAIL: $*" >&2
	exit 1
}
installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' corral 2>/dev/null)" = installed ]; }
# pids of processes of the package's binary (the deleted inode too), with argv[1..2] matching $1
pids_of() {
	local p exe
	for p in /proc/[0-9]*; do
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		[ "$exe" = "$corral" ] || [ "$exe" = "$corral (deleted)" ] || continue
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "^[^ ]* $1" && echo "${p#/proc/}"
	done
	return 0
}
# Everything this script starts, stopped: on a failure (so the rest of CI
# runs on a quiet machine) and before a run (a previous one's).
stop_all() {
	local c=$corral
	[ -x "$c" ] || c=/var/lib/corral/.purge/corral
	[ -x "$c" ] || return 0
	[ -S "$sock" ] && "$c" sandbox delete "$svc" >/dev/null 2>&1 || true
	"$c" service stop "$svc" >/dev/null 2>&1 || true
	for pid in $(pids_of "gateway serve") $(pids_of __corral_persist); do
		kill -TERM "$pid" 2>/dev/null || true
	done
	sleep 0.5
}
trap 'rc=$?; [ $rc = 0 ] || stop_all; exit $rc' EXIT

step "clean up after an earlier run"
if dpkg-query -W corral >/dev/null 2>&1; then
	stop_all
	dpkg -P corral >/dev/null || fail "an earlier run's corral package could not be purged"
fi
# A purge that failed part way left this script's agent user (the scan of
# that run said so); its mark says it is the cycle's session's.
if [ "$(getent passwd "corral-$svc" | cut -d: -f5,6)" = "corral service $svc:/var/lib/corral/services/$svc/home" ]; then
	echo "package-cycle: removing an earlier run's agent user corral-$svc" >&2
	userdel "corral-$svc"
fi
rm -rf "$work"
mkdir -p "$work"

step "build 0.0.0~ci1 and 0.0.0~ci2"
deb1=$(packaging/deb/build.sh 0.0.0~ci1 "$work" 2>"$work/build1.log") || { cat "$work/build1.log"; fail "build ci1"; }
deb2=$(packaging/deb/build.sh 0.0.0~ci2 "$work" 2>"$work/build2.log") || { cat "$work/build2.log"; fail "build ci2"; }
dpkg-deb -c "$deb2" >"$work/files"
go build -o "$work/corral-scan" ./packaging/scan/cmd/corral-scan
"$work/corral-scan" -o json >"$work/before.json" || true # what is here already

step "install ci1"
dpkg -i "$deb1" >"$work/install1.log" 2>&1 || { cat "$work/install1.log"; fail "dpkg -i ci1"; }
"$corral" version | grep -qx 'corral 0.0.0~ci1' || fail "corral version after install: $("$corral" version | head -1)"
for f in /usr/share/man/man1/corral.1.gz /usr/share/man/man1/corral-service-start.1.gz /usr/share/bash-completion/completions/corral \
	/usr/share/zsh/vendor-completions/_corral /usr/share/fish/vendor_completions.d/corral.fish /usr/share/doc/corral/README.md /usr/share/doc/corral/docs/install.md; do
	[ -s "$f" ] || fail "$f is not installed"
done
zcat /usr/share/man/man1/corral-run.1.gz | grep -q '^\.TH "CORRAL-RUN" "1"' || fail "corral-run.1 is not a man page"
doctor=$("$corral" doctor -o json 2>/dev/null || true)
grep -q '"installed_by": "dpkg' <<<"$doctor" || fail "corral doctor does not say dpkg installed it: $(grep installed_by <<<"$doctor")"

step "README's first command through /usr/bin/corral"
repo=$work/repo
mkdir -p "$repo"
git -C "$repo" init -q
echo hello >"$repo/file"
(cd "$repo" && "$corral" run -v -- sh -c 'git status --short | head -3; ls -la ~; cat ~/.ssh/id_* /etc/shadow || echo "denied, as it should be"') >"$work/run.out" 2>&1 ||
	{ cat "$work/run.out"; fail "corral run exited $?"; }
grep -q '^denied, as it should be$' "$work/run.out" || { cat "$work/run.out"; fail "corral run: ~/.ssh or /etc/shadow readable"; }

step "a service with autostart, and the gateway with a linux sandbox"
"$corral" service provision "$svc" >/dev/null
"$corral" service start "$svc" --settle 1s -- sleep 86400 >/dev/null
"$corral" service autostart enable "$svc" >/dev/null
unit=/etc/systemd/system/corral-service-$svc.service
[ -f "$unit" ] || fail "autostart enable wrote no $unit"
"$corral" gateway serve --provider linux >"$work/gateway.log" 2>&1 &
for _ in $(seq 100); do
	[ -S "$sock" ] && "$corral" sandbox list >/dev/null 2>&1 && break
	sleep 0.1
done
"$corral" sandbox create --name "$svc" -C "$repo" >/dev/null || { cat "$work/gateway.log"; fail "sandbox create"; }
"$corral" sandbox exec "$svc" -- true || fail "sandbox exec"
sup=$(cat /var/lib/corral/services/$svc/supervisor.pid)

step "upgrade to ci2 with them running"
dpkg -i "$deb2" >"$work/install2.log" 2>&1 || { cat "$work/install2.log"; fail "dpkg -i ci2"; }
"$corral" version | grep -qx 'corral 0.0.0~ci2' || fail "corral version after the upgrade: $("$corral" version | head -1)"
grep -q 'still run the old binary' "$work/install2.log" || { cat "$work/install2.log"; fail "postinst did not list what runs the old binary"; }
[ "$(cat /var/lib/corral/services/$svc/supervisor.pid)" = "$sup" ] || fail "the upgrade restarted the service"
[ "$(readlink /proc/"$sup"/exe)" = "$corral (deleted)" ] || fail "the service's supervisor does not run the old binary: $(readlink /proc/"$sup"/exe)"
"$corral" service status "$svc" >/dev/null || fail "service status after the upgrade: $?"
"$corral" sandbox exec "$svc" -- true || fail "the gateway (old binary) does not serve the sandbox after the upgrade"
"$corral" service restart "$svc" >/dev/null
sup=$(cat /var/lib/corral/services/$svc/supervisor.pid)
[ "$(readlink /proc/"$sup"/exe)" = "$corral" ] || fail "restart did not move the service to the new binary"

step "dpkg -r while they run: refused"
if dpkg -r corral >"$work/remove1.log" 2>&1; then
	cat "$work/remove1.log"
	fail "dpkg -r went through with a service and the gateway running"
fi
for want in "service $svc (running): corral service stop $svc" "the supervisor of service $svc" "corral gateway serve: stop it" "gateway sandbox corral-"; do
	grep -qF "$want" "$work/remove1.log" || { cat "$work/remove1.log"; fail "the refusal does not say: $want"; }
done
installed || fail "a refused removal left the package $(dpkg-query -W -f='${db:Status-Status}' corral)"
"$corral" service status "$svc" >/dev/null || fail "a refused removal touched the service"

step "stop them; dpkg -r keeps the state"
"$corral" sandbox delete "$svc" >/dev/null
for pid in $(pids_of "gateway serve"); do kill -TERM "$pid"; done
wait
"$corral" service stop "$svc" >/dev/null
dpkg -r corral >"$work/remove2.log" 2>&1 || { cat "$work/remove2.log"; fail "dpkg -r with nothing running"; }
[ ! -e "$corral" ] || fail "dpkg -r left $corral"
[ -f /var/lib/corral/services/$svc/service.json ] || fail "dpkg -r removed the service's record"
getent passwd "corral-$svc" >/dev/null || fail "dpkg -r removed the agent user"
[ ! -e "$unit" ] || fail "dpkg -r left autostart enabled (a unit that runs a missing binary)"
grep -qx "$svc" /var/lib/corral/autostart-disabled || fail "dpkg -r did not remember the autostart it disabled"

step "reinstall: autostart again; dpkg -P"
dpkg -i "$deb2" >"$work/install3.log" 2>&1 || { cat "$work/install3.log"; fail "dpkg -i after dpkg -r"; }
[ -f "$unit" ] || { cat "$work/install3.log"; fail "the reinstall did not enable autostart again"; }
[ ! -e /var/lib/corral/.purge ] || fail "the reinstall left the purge's binary"
dpkg -P corral >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg -P"; }
! dpkg-query -W corral >/dev/null 2>&1 || fail "dpkg -P left the package's record: $(dpkg-query -W -f='${db:Status-Abbrev}' corral)"

step "scan: nothing left"
"$work/corral-scan" -files "$work/files" -baseline "$work/before.json" -recheck 3s >"$work/scan.txt" || { cat "$work/scan.txt"; fail "the purge left Corral's things (LEFT above)"; }
grep -E '^(clean|found|skip) ' "$work/scan.txt" | cut -c1-100
step "passed"
