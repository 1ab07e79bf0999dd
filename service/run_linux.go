//go:build linux

package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// RunOptions describe a one-shot session (Run).
type RunOptions struct {
	PolicyFile, PolicyName string
	Workdir                string // canonical, existing; "" = the session's home
	Command                []string
	Supervisor             SupervisorOptions
}

// Run runs one command in a fresh, throwaway session, as a gateway would
// be run: its own agent user (root), a session home, the supervisor —
// here in the foreground, with the caller's stdio, signals forwarded and
// the policy's timeout applied — then removes the session. It returns
// the exit code: the command's, or a provider code's (docs/exit-codes.md).
// Sessions of one-shot runs whose corral is gone (SIGKILL) are removed
// first.
func Run(ctx context.Context, o RunOptions) int {
	SweepOneShot()
	var b [4]byte
	_, _ = rand.Read(b[:])
	self := ProcOf(os.Getpid())
	rec, err := Provision(ctx, ProvisionOptions{Name: "run-" + hex.EncodeToString(b[:]), Base: RunBase(), PolicyFile: o.PolicyFile,
		PolicyName: o.PolicyName, Workdir: o.Workdir, Owner: &self})
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral: %v\n", err)
		return exitCodeOf(err)
	}
	defer func() {
		if err := removeSession(rec); err != nil {
			fmt.Fprintf(os.Stderr, "corral: removing session %s: %v (corral service reconcile removes it)\n", rec.Name, err)
		}
	}()
	rec.Start = &StartSpec{Command: o.Command, Restart: "never"}
	if err := rec.Save(); err != nil {
		fmt.Fprintf(os.Stderr, "corral: %v\n", err)
		return exitCodeOf(err)
	}
	so := o.Supervisor
	so.Foreground = &Foreground{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	return Supervise(rec.Dir, nil, so)
}

// SweepOneShot removes the sessions of one-shot runs whose corral is
// gone, and returns their names.
func SweepOneShot() []string {
	base := RunBase()
	names, _ := List(base)
	var out []string
	for _, n := range names {
		p := PathsOf(base, n)
		rec, err := LoadRecord(p)
		if err != nil || rec.Owner == nil || rec.Owner.Alive() {
			continue
		}
		unlock, err := Lock(p, 100*time.Millisecond)
		if err != nil {
			continue
		}
		if removeSession(rec) == nil {
			out = append(out, n)
		}
		unlock()
	}
	return out
}

// exitCodeOf is the documented exit status for an error of provisioning.
func exitCodeOf(err error) int {
	var pe *provider.Error
	if errors.As(err, &pe) || isPolicyError(err) {
		return codeOf(err).ExitCode()
	}
	return provider.CodeProvisionFailed.ExitCode()
}

// codeOf is err's provider code: its own, policy_rejected for a policy
// error, else start_failed (the sandbox or its supervisor could not run).
func codeOf(err error) provider.Code {
	var pe *provider.Error
	switch {
	case errors.As(err, &pe):
		return pe.Code
	case isPolicyError(err):
		return provider.CodePolicyRejected
	}
	return provider.CodeStartFailed
}

func isPolicyError(err error) bool {
	var one *policy.Error
	var many policy.Errors
	return errors.As(err, &one) || errors.As(err, &many)
}
