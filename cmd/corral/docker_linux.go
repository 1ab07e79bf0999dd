//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/docker"
)

// osCommands are the commands only a Linux build has. corral service is
// the Linux one, or with CORRAL_SERVICE_PROVIDER=mxc the one on MXC
// isolation sessions (Windows', here through the executor stand-in).
func osCommands() []*cobra.Command {
	svc := newServiceCmd()
	if os.Getenv(ServiceProviderEnv) == "mxc" {
		svc = newServiceMXCCmd()
	}
	return []*cobra.Command{newGCCmd(), newImageCmd(), newGatewayCmd(), newSandboxCmd(), svc, newApprovalsCmd()}
}

func newGCCmd() *cobra.Command {
	var output outputFormat
	c := &cobra.Command{
		Use:   "gc",
		Short: "Remove the containers of docker sandboxes whose corral has ended",
		Long: `Remove the containers (and their state directories) of docker sandboxes
whose corral is no longer running: a corral killed with SIGKILL leaves its
container behind. Every corral run --provider docker does this too before it
creates its own container. Containers of running corrals are never touched,
and an unprivileged user removes only its own.

Exit status: 0, 121 when the Docker daemon cannot be reached, 119 when a
container could not be removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			removed, err := docker.New().Sweep(ctx)
			if err != nil {
				return &provider.Error{Code: provider.CodeUnavailable, Msg: err.Error()}
			}
			if output.data() {
				if removed == nil {
					removed = []docker.Removed{}
				}
				if err := output.write(os.Stdout, removed); err != nil {
					return err
				}
			}
			failed := 0
			for _, r := range removed {
				if r.Error != "" {
					failed++
				}
				if output.data() {
					continue
				}
				if r.Error != "" {
					fmt.Printf("%s  %.12s  not removed: %s\n", r.Sandbox, r.ID, r.Error)
				} else {
					fmt.Printf("%s  %.12s  removed (%s; %s)\n", r.Sandbox, r.ID, r.State, r.Reason)
				}
			}
			if !output.data() && len(removed) == 0 {
				fmt.Println("nothing to remove")
			}
			if failed > 0 {
				return &provider.Error{Code: provider.CodeStopFailed, Msg: fmt.Sprintf("%d containers could not be removed", failed)}
			}
			return nil
		},
	}
	outputFlag(c, &output)
	return c
}

func newImageCmd() *cobra.Command {
	c := &cobra.Command{Use: "image", Short: "Images for the docker provider"}
	var tag, busybox string
	build := &cobra.Command{
		Use:   "build-base",
		Short: "Build the docker provider's base image from this host's busybox-static",
		Long: `Build Corral's base image — a static busybox and its applets, /etc/passwd
and /etc/group with root and nobody — from this host's Debian busybox-static
package and import it into the Docker daemon. Nothing is pulled from a
registry. Corral's own binary is not in the image: the docker provider mounts
it into every container.

Exit status: 0 when the image is built; 2 when it is not (busybox-static
is not installed, the Docker daemon cannot be reached: the message says
which and how to fix it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			id, err := docker.BuildBase(ctx, tag, busybox)
			if err != nil {
				return err
			}
			fmt.Printf("%s %s\n", tag, id)
			return nil
		},
	}
	build.Flags().StringVar(&tag, "tag", policy.DefaultDockerImage, "image reference to tag the result with")
	build.Flags().StringVar(&busybox, "busybox", "", "static busybox to use (default: busybox in PATH)")
	c.AddCommand(build)
	return c
}
