//go:build tools

// Package tools pins what scripts/k8s/build.sh builds from github.com/containernetworking/plugins v1.9.1.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
