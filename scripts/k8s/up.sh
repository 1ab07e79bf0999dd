#!/usr/bin/env bash
# Start a single-node Kubernetes on loopback from the binaries build.sh
# cached: etcd, kube-apiserver (https://127.0.0.1:16443),
# kube-controller-manager, kube-scheduler, containerd (own socket
# /run/corral-k8s/containerd.sock and own root/state dirs), the kubelet
# (127.0.0.1:10250), a CNI bridge corral0 (10.88.0.0/24, no routes), the
# locally written images imported, the agent-sandbox CRDs installed and its
# controller running out of cluster. Root only; ~15 s.
#
# Before anything starts it records the host state down.sh restores
# ($K8S_STATE/before: sysctls, which paths existed, iptables chains, routes)
# and shuts every way out: a blackhole route for the service CIDR
# 10.96.0.0/24 (there is no kube-proxy, so a Service IP would otherwise
# follow the host's default route) and pods with no default route (the CNI
# config has none). Nothing is pulled (imagePullPolicy Never; the pause
# image is pinned).
#
# Writes: the admin kubeconfig at /tmp/corral-k8s/admin.kubeconfig (printed
# last), PIDs in /tmp/corral-k8s/pids ("name pid starttime"), logs in
# /tmp/corral-k8s/log. A previous cluster not torn down is torn down first.
# On failure it prints the logs' tails and runs down.sh
# (CORRAL_K8S_KEEP_ON_FAIL=1 leaves the cluster for a look).
set -eEuo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "up.sh: must run as root" >&2; exit 1; }
[ -f "$K8S_STAMP" ] || { echo "up.sh: no binaries in $K8S_OPT: run scripts/k8s/build.sh" >&2; exit 1; }
KUBECTL=$(kubectl_bin)
if [ -e "$K8S_STATE/before" ] || [ -e "$K8S_STATE/pids" ] || [ -e "$K8S_RUN" ]; then
	echo "a previous cluster was not torn down: down.sh first"
	"$K8S_SRC/down.sh"
fi

S=$K8S_STATE P=$K8S_STATE/pki V=$K8S_STATE/var L=$K8S_STATE/log B=$K8S_BIN
NODE=$(hostname | tr 'A-Z' 'a-z')
t0=$(now_ms)
lap() { printf '%-34s %6d ms\n' "$1" $(( $(now_ms) - t0 )); }
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

failed() {
	local rc=$?
	trap - ERR
	echo "up.sh: failed (rc=$rc) after $(( $(now_ms) - t0 )) ms" >&2
	for f in "$L"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
	if [ "${CORRAL_K8S_KEEP_ON_FAIL:-}" = 1 ]; then
		echo "up.sh: CORRAL_K8S_KEEP_ON_FAIL=1: left as is; scripts/k8s/down.sh undoes it" >&2
	else
		"$K8S_SRC/down.sh" >&2 || true
	fi
	exit "$rc"
}
trap failed ERR

for port in 23790 23800 $APISERVER_PORT 10250 10248 10257 10259; do
	if ss -Hltn "sport = :$port" | grep -q .; then echo "up.sh: port $port is in use" >&2; false; fi
done
if ip link show "$BRIDGE" >/dev/null 2>&1 || ip route show "$POD_CIDR" | grep -q .; then
	echo "up.sh: $BRIDGE or a route for $POD_CIDR exists already" >&2; false
fi

# 1. Record what down.sh must restore. This directory's presence means "a
# cluster's host changes may be in place".
mkdir -p "$S/before" "$L" "$V" "$P"
chmod 700 "$S"
for k in $K8S_SYSCTLS; do
	v=$(sysctl -n "$k" 2>/dev/null) && printf '%s=%s\n' "$k" "$v"
done > "$S/before/sysctl"
for p in $K8S_HOST_PATHS; do
	if [ -e "$p" ]; then echo "$p present"; else echo "$p absent"; fi
done > "$S/before/paths"
mountpoint -q /run/netns 2>/dev/null && echo mounted > "$S/before/netns-mount" || echo not-mounted > "$S/before/netns-mount"
iptables_chains > "$S/before/iptables-chains"
ip route show "$SERVICE_CIDR" > "$S/before/service-route"
lap "host state recorded"

# 2. No way out: the service CIDR goes nowhere, before anything starts.
if ! grep -q blackhole "$S/before/service-route"; then
	ip route add blackhole "$SERVICE_CIDR"
	echo added > "$S/before/blackhole-added"
fi
ip route show "$SERVICE_CIDR" | grep -q "^blackhole" || { echo "up.sh: no blackhole route for $SERVICE_CIDR" >&2; false; }
lap "blackhole $SERVICE_CIDR"

: > "$S/pids"
start() { # name logfile cmd...: run in the background, record pid + start time
	local name=$1 log=$2
	shift 2
	"$@" >"$L/$log" 2>&1 </dev/null &
	local pid=$!
	echo "$name $pid $(pid_start "$pid")" >> "$S/pids"
}

# 3. PKI (EC P-256 keys: fast): one CA, the apiserver's serving cert, client
# certs, the service-account key pair, kubeconfigs. Valid for 2 days.
(
	cd "$P"
	ossl() { openssl "$@" 2>/dev/null; }
	ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=corral-k8s-test-ca"
	cert() { # name CN O ext
		ossl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2${3:+/O=$3}"
		printf '%s\n' "$4" > "$1.ext"
		ossl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 -extfile "$1.ext"
	}
	cert apiserver kube-apiserver "" "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
extendedKeyUsage=serverAuth"
	cert admin admin system:masters "extendedKeyUsage=clientAuth"
	cert kcm system:kube-controller-manager "" "extendedKeyUsage=clientAuth"
	cert sched system:kube-scheduler "" "extendedKeyUsage=clientAuth"
	cert kubelet "system:node:$NODE" system:nodes "extendedKeyUsage=clientAuth"
	cert apiserver-kubelet kube-apiserver-kubelet-client system:masters "extendedKeyUsage=clientAuth"
	ossl ecparam -name prime256v1 -genkey -noout -out sa.key
	ossl ec -in sa.key -pubout -out sa.pub
	for n in admin kcm sched kubelet; do
		cat > "$n.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: corral-k8s, cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: $P/ca.crt}}]
users: [{name: $n, user: {client-certificate: $P/$n.crt, client-key: $P/$n.key}}]
contexts: [{name: corral-k8s, context: {cluster: corral-k8s, user: $n}}]
current-context: corral-k8s
KC
	done
	chmod 600 ./*.key
)
cp "$P/admin.kubeconfig" "$KUBECONFIG_PATH"
lap "pki"

# 4. Configs: containerd, CNI, kubelet.
mkdir -p "$K8S_RUN" "$S/cni/net.d" "$V/cni-ipam" "$V/log/pods"
# Version 4 (containerd 2.4's); no imports (the default reads
# /etc/containerd/conf.d), shim sockets and the opt dir under our own dirs,
# so Docker's /run/containerd/s and /opt/containerd are left alone.
cat > "$S/containerd.toml" <<EOF
version = 4
root = '$V/containerd'
state = '$K8S_RUN/containerd'
imports = []
[plugins.'io.containerd.server.v1.grpc']
  address = '$K8S_SOCK'
[plugins.'io.containerd.server.v1.ttrpc']
  address = '$K8S_SOCK.ttrpc'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = '$K8S_RUN/s'
[plugins.'io.containerd.internal.v1.opt']
  path = '$V/containerd-opt'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$PAUSE_IMAGE'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$K8S_CNI_BIN']
    conf_dir = '$S/cni/net.d'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = '$B/runc'
    Root = '$K8S_RUN/runc'
    SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
EOF
cat > "$S/cni/net.d/10-corral.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "corral-bridge",
 "plugins": [{"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "isDefaultGateway": false, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GW"}]], "routes": [], "dataDir": "$V/cni-ipam"}}]}
EOF
cat > "$S/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$K8S_SOCK
failSwapOn: false
resolvConf: ""
podLogsDir: $V/log/pods
volumePluginDir: $V/kubelet-plugins
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
serializeImagePulls: false
EOF

# 5. etcd, kube-apiserver and containerd at once; images import while the
# apiserver starts.
start etcd etcd.log "$B/etcd" --name default --data-dir "$V/etcd" \
	--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
	--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
	--initial-cluster default=http://127.0.0.1:23800 --unsafe-no-fsync
start kube-apiserver apiserver.log "$B/kube-apiserver" --etcd-servers=http://127.0.0.1:23790 \
	--bind-address=127.0.0.1 --secure-port=$APISERVER_PORT --advertise-address=127.0.0.1 \
	--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$P/sa.pub" \
	--service-account-signing-key-file="$P/sa.key" --service-cluster-ip-range=$SERVICE_CIDR \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--kubelet-client-certificate="$P/apiserver-kubelet.crt" --kubelet-client-key="$P/apiserver-kubelet.key" \
	--kubelet-preferred-address-types=Hostname --endpoint-reconciler-type=none \
	--allow-privileged=true --profiling=false --cert-dir="$V/apiserver"
# The configuration as containerd reads it: its sockets, root and state
# must be ours, never Docker's (/run/containerd/containerd.sock,
# /var/lib/containerd) nor the shared /run/containerd/s.
"$B/containerd" --config "$S/containerd.toml" config dump > "$S/containerd.effective.toml" 2>/dev/null
for want in "address = '$K8S_SOCK'" "address = '$K8S_SOCK.ttrpc'" "root = '$V/containerd'" "state = '$K8S_RUN/containerd'" "socket_dir = '$K8S_RUN/s'"; do
	grep -qF "$want" "$S/containerd.effective.toml" || { echo "up.sh: containerd's effective config lacks: $want" >&2; false; }
done
if grep -E "'/run/containerd|'/var/lib/containerd" "$S/containerd.effective.toml" >&2; then
	echo "up.sh: containerd's effective config names a path of the host's containerd (above)" >&2; false
fi
start containerd containerd.log env PATH="$B:$PATH" "$B/containerd" --config "$S/containerd.toml"
CTR=("$B/ctr" --address "$K8S_SOCK" -n k8s.io)
wait_for() { # what tries interval cmd...
	local what=$1 n=$2 iv=$3 i
	shift 3
	for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep "$iv"; done
	echo "up.sh: timed out waiting for $what" >&2
	return 1
}
wait_for containerd 200 0.05 "${CTR[@]}" version
lap "containerd up"
for img in pause busybox; do
	"${CTR[@]}" images import "$K8S_IMG/$img.tar" 2>&1 >/dev/null | { grep -v 'DEPRECATION: The support for cgroup v1' || true; } >&2
done
lap "images imported"
wait_for "apiserver /readyz" 300 0.1 K get --raw /readyz
lap "apiserver ready"

# 6. Controllers, scheduler, kubelet, CRDs.
start kube-controller-manager kcm.log "$B/kube-controller-manager" --kubeconfig="$P/kcm.kubeconfig" \
	--authentication-kubeconfig="$P/kcm.kubeconfig" --authorization-kubeconfig="$P/kcm.kubeconfig" \
	--bind-address=127.0.0.1 --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
	--use-service-account-credentials=true --leader-elect=false --allocate-node-cidrs=false
start kube-scheduler scheduler.log "$B/kube-scheduler" --kubeconfig="$P/sched.kubeconfig" \
	--authentication-kubeconfig="$P/sched.kubeconfig" --authorization-kubeconfig="$P/sched.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false
start kubelet kubelet.log env PATH="$B:$PATH" "$B/kubelet" --config="$S/kubelet.yaml" --kubeconfig="$P/kubelet.kubeconfig" \
	--root-dir="$V/kubelet" --cert-dir="$V/kubelet/pki" --hostname-override="$NODE" -v=1
K apply --server-side -f "$K8S_CRDS" >/dev/null
K wait --for condition=established --timeout=60s -f "$K8S_CRDS" >/dev/null
lap "agent-sandbox CRDs established"
start agent-sandbox-controller agent-sandbox.log env KUBECONFIG="$KUBECONFIG_PATH" "$B/agent-sandbox-controller" \
	--leader-elect=false --extensions --metrics-bind-address=0 --health-probe-bind-address=0

node_ready() { K get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True; }
wait_for "node $NODE Ready" 600 0.1 node_ready
lap "node Ready"
wait_for "default service account" 300 0.1 K -n default get serviceaccount default
lap "default service account"
check_alive() { # every recorded process still runs
	local name pid st
	while read -r name pid st; do
		[ "$(pid_start "$pid")" = "$st" ] || { echo "up.sh: $name (pid $pid) exited; see $L" >&2; return 1; }
	done < "$S/pids"
}
check_alive
lap "cluster up"
echo "kubeconfig: $KUBECONFIG_PATH"
