//go:build tools

// Package tools pins what scripts/k8s/build.sh builds from github.com/opencontainers/runc v1.5.3.
package tools

import (
	_ "github.com/opencontainers/runc"
)
