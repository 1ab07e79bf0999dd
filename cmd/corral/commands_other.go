//go:build !linux && !windows

package main

import "github.com/spf13/cobra"

// osCommands: the gateway, services and docker's gc and image are Linux's
// and (the gateway) Windows'.
func osCommands() []*cobra.Command { return nil }

// policyGatewayCmds: no gateway on this OS.
func policyGatewayCmds() []*cobra.Command { return nil }
