//go:build tools

// Package tools pins what scripts/k8s/build.sh builds from github.com/containerd/containerd/v2 v2.4.2.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
