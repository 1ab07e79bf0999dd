//go:build !linux

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newQualifyCmd: the adversarial suite runs on Linux hosts only for now.
func newQualifyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "qualify",
		Short: "Run the adversarial suite (Linux hosts only in this build)",
		Long: `The adversarial suite runs on Linux hosts only in this build.

Exit status: 2 (the suite cannot run here).`,
		Annotations: map[string]string{noDataAnnotation: "says only that it cannot run here"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("corral qualify runs on Linux hosts only in this build")
		},
	}
}
