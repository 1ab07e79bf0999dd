//go:build tools

// Package tools pins the agent-sandbox controller scripts/k8s/build.sh
// builds: sigs.k8s.io/agent-sandbox at the exact version go.mod requires
// (the proxy serves no version list, so `go install pkg@v` fails).
package tools

import (
	_ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
)
