//go:build tools

// Package tools pins the cluster binaries scripts/k8s/build.sh builds:
// kube-apiserver, kubelet, kube-controller-manager, kube-scheduler (and
// kubectl, built only when the machine has none) from k8s.io/kubernetes,
// and etcd from go.etcd.io/etcd/server/v3, at the versions go.mod requires.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
