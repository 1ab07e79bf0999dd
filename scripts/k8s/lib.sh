# Shared settings of scripts/k8s/*.sh (sourced, not run). Versions, the
# per-machine build cache and the cluster's state directories.

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
CONTAINERD_VERSION=v2.4.2
CNI_PLUGINS_VERSION=v1.9.1
RUNC_VERSION=v1.5.3
AGENT_SANDBOX_VERSION=v1.0.3
PAUSE_IMAGE=corral.local/pause:3.10
BUSYBOX_IMAGE=corral.local/busybox:1

K8S_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Built once per machine (scripts/k8s/build.sh), kept across runs.
K8S_OPT=${CORRAL_K8S_OPT:-/opt/corral-ci/k8s}
K8S_BIN=$K8S_OPT/bin
K8S_CNI_BIN=$K8S_OPT/cni/bin
K8S_IMG=$K8S_OPT/img
K8S_CRDS=$K8S_OPT/crds
K8S_STAMP=$K8S_OPT/stamp
# One cluster's life (up.sh .. down.sh). /run/corral-k8s holds sockets and
# containerd's state; nothing of Docker's (/run/containerd/containerd.sock,
# /var/lib/containerd, /run/docker) is used.
K8S_STATE=${CORRAL_K8S_STATE:-/tmp/corral-k8s}
K8S_RUN=/run/corral-k8s
K8S_SOCK=$K8S_RUN/containerd.sock
KUBECONFIG_PATH=$K8S_STATE/admin.kubeconfig
SERVICE_CIDR=10.96.0.0/24
POD_CIDR=10.88.0.0/24
POD_GW=10.88.0.1
BRIDGE=corral0
APISERVER_PORT=16443

export PATH=/usr/local/go/bin:$PATH

# The binaries build.sh leaves in $K8S_BIN ($K8S_CNI_BIN for the plugins).
K8S_BINARIES="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet containerd containerd-shim-runc-v2 ctr runc agent-sandbox-controller"
K8S_CNI_BINARIES="bridge host-local loopback"

# kubectl: the machine's if it has one (1.32 works against 1.37 with a skew
# warning), else the one build.sh built.
kubectl_bin() {
	if [ -x "$K8S_BIN/kubectl" ]; then echo "$K8S_BIN/kubectl"; return; fi
	command -v kubectl || { echo "no kubectl: run scripts/k8s/build.sh" >&2; return 1; }
}

# The stamp build.sh writes when every output is in place: the versions, the
# Go toolchain, busybox's package version and a hash of the wrapper modules.
# A different stamp means "build again".
expected_stamp() {
	local bb
	bb=$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null || echo none)
	echo "kubernetes=$K8S_VERSION etcd=$ETCD_VERSION containerd=$CONTAINERD_VERSION cni-plugins=$CNI_PLUGINS_VERSION runc=$RUNC_VERSION agent-sandbox=$AGENT_SANDBOX_VERSION"
	echo "go=$(go env GOVERSION) busybox-static=$bb kubectl=$(command -v kubectl >/dev/null && echo machine || echo built)"
	echo "modules=$(cd "$K8S_SRC" && find kube asb containerd runc cni images -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Sysctls the kubelet (setupKernelTunables) and the CNI bridge may change;
# up.sh records them, down.sh writes back any that differ.
K8S_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"
# Host paths the kubelet, containerd or the CNI plugins may create outside
# the cluster's own dirs; down.sh removes the ones that were absent before.
K8S_HOST_PATHS="/var/lib/kubelet /var/lib/kubelet/device-plugins /var/lib/cni /var/lib/cni/results /run/containerd /run/containerd/s /run/containerd/runc /run/nri /run/netns /var/log/containers /var/log/pods /etc/cni /opt/cni /etc/kubernetes"
K8S_IPT_TABLES="filter nat mangle raw"

# "iptables|ip6tables TABLE CHAIN" for every user chain.
iptables_chains() {
	local ipt t
	for ipt in iptables ip6tables; do
		command -v $ipt >/dev/null || continue
		for t in $K8S_IPT_TABLES; do
			$ipt -w 5 -t $t -S 2>/dev/null | awk -v i=$ipt -v t=$t '$1 == "-N" {print i, t, $2}'
		done
	done
}

# A process's start time (clock ticks since boot, /proc/PID/stat field 22),
# empty when it is gone: with the PID it names one process, not a reuse.
pid_start() {
	[ -r "/proc/$1/stat" ] || return 0
	sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}
