#!/usr/bin/env bash
# Tear down the cluster up.sh started and undo what it and the kubelet,
# containerd and the CNI plugins did to the host. Idempotent, and safe after
# an up.sh that failed part way: every step checks before it acts.
#
#  1. processes, by the PIDs up.sh recorded in /tmp/corral-k8s/pids (a PID
#     whose start time no longer matches is someone else's and is left
#     alone; nothing is killed by name): the agent-sandbox controller,
#     controller-manager, scheduler and kubelet (TERM, 5 s, KILL), the pods'
#     tasks via ctr, containerd, its shims (the processes listening on the
#     sockets its bundles name, under /run/corral-k8s/s), any process still
#     in a kubepods cgroup, the apiserver and etcd;
#  2. mounts under /run/corral-k8s and /tmp/corral-k8s, and the /run/netns
#     bind mount if it was not mounted before up;
#  3. kubepods cgroups (every v1 hierarchy), the corral0 bridge, the
#     blackhole route (if up added it), iptables chains KUBE-* that did
#     not exist before up (and the rules jumping to them), the sysctls
#     recorded before up, and /var/lib/kubelet{,/device-plugins},
#     /var/lib/cni{,/results}, /run/containerd/runc, /run/nri, /run/netns,
#     /var/log/containers when absent before up; in /run/containerd/s
#     (Docker's shims use it too) only the sockets of this cluster's shims;
#  4. /run/corral-k8s and the state dir but its logs (kept in
#     /tmp/corral-k8s/log for a look; the next up.sh overwrites them).
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "down.sh: must run as root" >&2; exit 1; }
S=$K8S_STATE B=$K8S_BIN
t0=$(now_ms)
CTR=("$B/ctr" --address "$K8S_SOCK" -n k8s.io)
say() { printf "down: %-60s %6d ms\n" "$*" $(( $(now_ms) - t0 )); }

pid_of() { # name -> pid if recorded and still the same process
	[ -f "$S/pids" ] || return 1
	local name pid st
	while read -r name pid st; do
		if [ "$name" = "$1" ] && [ -n "$pid" ] && [ "$(pid_start "$pid")" = "$st" ]; then
			echo "$pid"
			return 0
		fi
	done < "$S/pids"
	return 1
}
stop_pid() { # pid label: TERM, up to 5 s, then KILL
	local pid=$1 st i
	st=$(pid_start "$pid")
	[ -n "$st" ] || { say "stopped $2 ($pid)"; return 0; }
	kill -TERM "$pid" 2>/dev/null || { say "stopped $2 ($pid)"; return 0; }
	for ((i = 0; i < 50; i++)); do
		[ "$(pid_start "$pid")" = "$st" ] || { say "stopped $2 ($pid)"; return 0; }
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	for ((i = 0; i < 20; i++)); do [ "$(pid_start "$pid")" = "$st" ] || break; sleep 0.1; done
	say "killed $2 ($pid)"
}
stop() { local pid; pid=$(pid_of "$1") && stop_pid "$pid" "$1"; }
stop_many() { # names...: TERM them all at once, then as stop_pid
	local n pid pids=()
	for n in "$@"; do pid=$(pid_of "$n") && kill -TERM "$pid" 2>/dev/null && pids+=("$pid:$n"); done
	for n in "${pids[@]-}"; do [ -n "$n" ] && stop_pid "${n%%:*}" "${n#*:}"; done
}
ctr_up() { pid_of containerd >/dev/null && timeout 5 "${CTR[@]}" version >/dev/null 2>&1; }
tasks() { timeout 10 "${CTR[@]}" tasks ls -q 2>/dev/null; }

# 1. Processes. The pods are not deleted through the API first: killing
# their tasks and unmounting their network namespaces (below) removes as
# much (the veth goes with its namespace), in a fraction of the time.
stop_many agent-sandbox-controller kube-controller-manager kube-scheduler kubelet
if ctr_up; then
	ts=$(tasks)
	for t in $ts; do timeout 10 "${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 & done
	wait
	for t in $ts; do timeout 10 "${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1; done
	[ -z "$ts" ] || say "killed $(echo $ts | wc -w) tasks"
fi
stop containerd
# Shims this containerd started: each bundle in its state dir names its
# shim's socket (bootstrap.json, "address"); the shim is the process
# listening on it. Docker's shims have other sockets and are left alone.
shim_sockets=()
for f in "$K8S_RUN"/containerd/io.containerd.runtime.v2.task/*/*/bootstrap.json "$K8S_RUN"/containerd/io.containerd.runtime.v2.task/*/*/address; do
	[ -f "$f" ] || continue
	a=$(sed -n 's#.*unix://\([^"]*\).*#\1#p' "$f" | head -1)
	[ -n "$a" ] || a=$(cat "$f")
	a=${a#unix://}
	case " ${shim_sockets[*]-} " in *" $a "*) ;; *) [ -n "$a" ] && shim_sockets+=("$a") ;; esac
done
for a in "${shim_sockets[@]-}"; do
	[ -n "$a" ] || continue
	for pid in $(ss -xlpH 2>/dev/null | awk -v a="$a" '$5 == a' | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
		kill -KILL "$pid" 2>/dev/null && say "killed shim $pid (socket $a)"
	done
done
# What is left in kubepods cgroups is this kubelet's pods' processes.
for ((round = 0; round < 3; round++)); do
	left=$(cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/*/cgroup.procs 2>/dev/null | sort -u)
	[ -n "$left" ] || break
	say "killing $(echo $left | wc -w) processes left in kubepods cgroups"
	kill -KILL $left 2>/dev/null
	sleep 0.3
done
stop_many kube-apiserver etcd
# Anything else recorded (a name added later).
if [ -f "$S/pids" ]; then
	while read -r name pid st; do
		[ "$(pid_start "$pid")" = "$st" ] && stop_pid "$pid" "$name"
	done < "$S/pids"
	rm -f "$S/pids"
fi
say "processes stopped"

# 2. Mounts: the deepest first.
# Without up.sh's record (it failed before it wrote one, or down.sh ran
# already) nothing outside the cluster's own dirs is touched.
recorded() { [ -d "$S/before" ]; }
absent_before() { [ -f "$S/before/paths" ] && grep -qx "$1 absent" "$S/before/paths"; }
umount_under() {
	local m
	awk '{print $5}' /proc/self/mountinfo | grep -E "^$1(/|$)" | sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null && say "unmounted $m"
	done
}
umount_under "$K8S_RUN"
umount_under "$K8S_STATE"
if [ "$(cat "$S/before/netns-mount" 2>/dev/null)" = not-mounted ]; then
	umount_under /run/netns
fi

# 3. Host side effects, when up.sh recorded the host before it began.
recorded || say "no record of the host before up: host left as it is"
for d in /sys/fs/cgroup/*/kubepods; do
	recorded || break
	[ -d "$d" ] || continue
	find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	[ -d "$d" ] && say "could not remove $d" || say "removed cgroup $d"
done
if recorded && ip link show "$BRIDGE" >/dev/null 2>&1; then
	ip link del "$BRIDGE" && say "removed bridge $BRIDGE"
fi
if [ -f "$S/before/blackhole-added" ]; then
	ip route del blackhole "$SERVICE_CIDR" 2>/dev/null && say "removed blackhole $SERVICE_CIDR"
	rm -f "$S/before/blackhole-added"
fi
if [ -f "$S/before/iptables-chains" ]; then
	iptables_chains | grep -E ' KUBE-[A-Z0-9-]+$' | grep -vxF -f "$S/before/iptables-chains" | while read -r ipt t chain; do
		# Rules in other chains that jump to it, then the chain.
		$ipt -w 5 -t "$t" -S | grep -E -- "-j $chain( |$)" | grep -v "^-A $chain " | sed 's/^-A /-D /' | while read -r rule; do
			eval "$ipt -w 5 -t $t $rule"
		done
		$ipt -w 5 -t "$t" -F "$chain" && $ipt -w 5 -t "$t" -X "$chain" && say "removed $ipt -t $t $chain"
	done
fi
if [ -f "$S/before/sysctl" ]; then
	while IFS='=' read -r k v; do
		[ "$(sysctl -n "$k" 2>/dev/null)" = "$v" ] && continue
		sysctl -q -w "$k=$v" && say "restored $k=$v"
	done < "$S/before/sysctl"
fi
for p in /var/lib/kubelet/device-plugins /var/lib/cni/results /run/containerd/runc /run/nri /var/log/containers; do
	[ -e "$p" ] && absent_before "$p" && rm -rf "$p" && say "removed $p"
done
for p in /var/lib/kubelet /var/lib/cni /run/netns; do
	[ -e "$p" ] && absent_before "$p" && rmdir "$p" 2>/dev/null && say "removed $p"
done
for a in "${shim_sockets[@]-}"; do
	[ -n "$a" ] && [ -S "$a" ] && rm -f "$a" && say "removed shim socket $a"
done
if [ -d /run/containerd/s ] && absent_before /run/containerd/s; then
	rmdir /run/containerd/s 2>/dev/null && say "removed /run/containerd/s"
fi
if [ -d /run/containerd ] && absent_before /run/containerd; then
	rmdir /run/containerd 2>/dev/null && say "removed /run/containerd"
fi

# 4. Own dirs. The logs stay for a look.
rm -rf "$K8S_RUN"
if [ -d "$S" ]; then
	find "$S" -mindepth 1 -maxdepth 1 ! -name log ! -name before -exec rm -rf {} +
	rm -rf "$S/before"
fi
say "done"
