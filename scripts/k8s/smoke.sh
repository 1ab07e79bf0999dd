#!/usr/bin/env bash
# The test cluster end to end, then proof the host is as it was:
#   snapshot the host; up.sh; a hardened busybox pod (imagePullPolicy Never,
#   restartPolicy Never, non-root, drop ALL, no privilege escalation,
#   read-only root, no service-account token) Ready; kubectl exec in it: it
#   runs as 65534, cannot write /, and has no default route (nor any way to
#   10.96.0.0/24 or beyond its own subnet); an agent-sandbox Sandbox Ready
#   and exec in its pod; down.sh; snapshot again and diff: sysctls,
#   iptables -S (all tables, v4 and v6), ip route (all tables), links,
#   mounts under /run, cgroup dirs named kubepods, the host paths up may
#   create, and the files two levels down /etc /opt /run /var/lib
#   /var/log. A difference that is this cluster's (kube, cni, containerd,
#   corral0, 10.88/10.96, netns, nri, kubepods, KUBE-) fails; any other is
#   printed as another process's doing (other agents share this machine).
# Root only. Exit 0 when every check held. Times each step.
set -eEuo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "smoke.sh: must run as root" >&2; exit 1; }
KUBECTL=$(kubectl_bin)
W=$(mktemp -d /tmp/corral-k8s-smoke.XXXXXX)
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
t_all=$(now_ms)
t=$t_all
lap() { local n; n=$(now_ms); printf 'smoke: %-40s %6d ms\n' "$1" $(( n - t )); t=$n; }
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }

snapshot() { # dir
	local d=$1 ipt tb p
	mkdir -p "$d"
	sysctl -a 2>/dev/null | grep -vE '^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.|aio-nr)|kernel\.(random\.|ns_last_pid|pty\.nr)|net\.netfilter\.nf_conntrack_count|net\.ipv[46]\.(conf|neigh)\.)' |
		sort > "$d/sysctl"
	sysctl -a 2>/dev/null | grep -E '^net\.ipv[46]\.(conf|neigh)\.(all|default|lo|eth0)\.' | sort >> "$d/sysctl"
	for ipt in iptables ip6tables; do
		for tb in $K8S_IPT_TABLES; do
			$ipt -w 5 -t "$tb" -S 2>/dev/null | sed "s/^/$ipt -t $tb /"
		done
	done > "$d/iptables"
	{ ip route show table all; ip -6 route show table all; } | sort > "$d/routes"
	ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort > "$d/links"
	awk '$5 ~ /^\/run(\/|$)/ {print $5, $9}' /proc/self/mountinfo | sort > "$d/mounts"
	find /sys/fs/cgroup -maxdepth 5 -type d -name 'kubepods*' 2>/dev/null | sort > "$d/cgroups"
	for p in $K8S_HOST_PATHS; do
		if [ -e "$p" ]; then echo "$p present"; else echo "$p absent"; fi
	done > "$d/paths"
	find /etc /opt /run /var/lib /var/log -maxdepth 2 2>/dev/null | grep -v '^/run/docker' | sort > "$d/tree"
}

cleanup() {
	local rc=$?
	trap - EXIT ERR
	if [ "$rc" != 0 ]; then
		echo "smoke: failed (rc=$rc); logs in $K8S_STATE/log" >&2
		for f in "$K8S_STATE"/log/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 8 "$f" >&2; }; done
		"$K8S_SRC/down.sh" >&2 || true
	fi
	rm -rf "$W"
	exit "$rc"
}
trap cleanup EXIT

snapshot "$W/before"
lap "host snapshot"
"$K8S_SRC/up.sh" | sed 's/^/up: /'
lap "up.sh"

# A hardened pod.
cat > "$W/pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: smoke, namespace: default, labels: {corral.dev/smoke: "1"}}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 65534, runAsGroup: 65534, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: box
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "exec sleep 3600"]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
EOF
K apply -f "$W/pod.yaml" >/dev/null
K wait --for=condition=Ready pod/smoke --timeout=60s >/dev/null
lap "pod Ready"
gw=$(ip route show default | awk '{print $3; exit}')
out=$(K exec smoke -- sh -c 'id -u; id -g; ip route; echo ---; cat /proc/net/route; echo ---; touch /x 2>&1 && echo WROTE-ROOT; grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status; ls /var/run/secrets 2>&1; for a in "$@"; do nc -w 2 "$a" 80 </dev/null 2>&1 && echo "CONNECTED $a"; done; true' sh 10.96.0.1 1.1.1.1 ${gw:-192.0.2.1})
lap "kubectl exec"
echo "$out" | sed 's/^/pod: /'
[ "$(echo "$out" | sed -n 1p)" = 65534 ] || fail "pod runs as uid $(echo "$out" | sed -n 1p), want 65534"
route=$(echo "$out" | sed -n '3,/^---$/p')
echo "$route" | grep -q '^default' && fail "the pod has a default route"
echo "$out" | awk '/^---$/ {n++; next} n == 1' | awk 'NR > 1 && $2 == "00000000"' | grep -q . && fail "the pod's /proc/net/route has a 0.0.0.0 destination"
echo "$route" | grep -q "${POD_CIDR%/*}" || fail "the pod has no route for its subnet (no network?)"
echo "$out" | grep -q WROTE-ROOT && fail "the pod could write its root filesystem"
echo "$out" | grep -Eq '^CapEff:[[:space:]]+0+$' || fail "the pod has capabilities"
echo "$out" | grep -Eq '^NoNewPrivs:[[:space:]]+1$' || fail "no_new_privs is not set"
echo "$out" | grep -q CONNECTED && fail "a connection left the pod"
[ "$(echo "$out" | grep -c 'Network is unreachable')" -ge 2 ] || fail "connections out of the pod did not fail with 'Network is unreachable'"
echo "$out" | grep -q 'secrets.*No such file' || fail "a service-account token is mounted"
ip route show "$SERVICE_CIDR" | grep -q '^blackhole' || fail "no blackhole route for $SERVICE_CIDR on the host"
lap "pod checks"

# An agent-sandbox Sandbox.
cat > "$W/sandbox.yaml" <<EOF
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: smoke-sb, namespace: default}
spec:
  podTemplate:
    metadata: {labels: {corral.dev/smoke: "1"}}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      terminationGracePeriodSeconds: 1
      securityContext: {runAsUser: 65534, runAsGroup: 65534, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: agent
        image: $BUSYBOX_IMAGE
        imagePullPolicy: Never
        command: ["/bin/sh", "-c", "exec sleep 3600"]
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
EOF
K apply -f "$W/sandbox.yaml" >/dev/null
K wait --for=condition=Ready sandbox/smoke-sb --timeout=60s >/dev/null
lap "Sandbox Ready"
sbpod=$(K get pods -l corral.dev/smoke=1 -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep -vx smoke | head -1)
[ -n "$sbpod" ] || fail "no pod for the Sandbox"
[ "$(K exec "$sbpod" -- id -u)" = 65534 ] || fail "the Sandbox's pod does not run as 65534"
K exec "$sbpod" -- ip route | grep -q '^default' && fail "the Sandbox's pod has a default route"
lap "exec in the Sandbox's pod ($sbpod)"

"$K8S_SRC/down.sh"
lap "down.sh"

# The host as it was?
snapshot "$W/after"
ours='kube|KUBE-|cni|CNI-|containerd|corral0|corral-k8s|10\.88\.|10\.96\.|/run/netns|/run/nri|^[<>] veth[0-9a-f]{8}$'
bad=0
for f in sysctl iptables routes links mounts cgroups paths tree; do
	d=$(diff "$W/before/$f" "$W/after/$f" || true)
	[ -z "$d" ] && { echo "smoke: host $f: unchanged"; continue; }
	mine=$(echo "$d" | grep -E '^[<>]' | grep -E "$ours" | grep -v ' /run/docker/' || true)
	# A kubelet-tuned sysctl is this cluster's whatever its name.
	[ "$f" = sysctl ] && mine=$(echo "$d" | grep -E '^[<>]' || true)
	if [ -n "$mine" ]; then
		echo "smoke: host $f differs after down:" >&2
		echo "$mine" >&2
		bad=1
	else
		echo "smoke: host $f: changed by another process on the machine, not this cluster (ignored):"
		echo "$d" | grep -E '^[<>]' | head -5 | sed 's/^/  /'
	fi
done
[ "$bad" = 0 ] || fail "the host was not restored"
lap "host restored (diff)"
echo "smoke: PASS in $(( $(now_ms) - t_all )) ms"
