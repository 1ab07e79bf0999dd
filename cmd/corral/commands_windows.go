package main

import "github.com/spf13/cobra"

// osCommands are the commands a Windows build has besides the portable
// ones: the gateway (its sandboxes on mxc) and its client, and services
// on MXC isolation sessions.
func osCommands() []*cobra.Command {
	return []*cobra.Command{newGatewayCmd(), newSandboxCmd(), newServiceMXCCmd()}
}
