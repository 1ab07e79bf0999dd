package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/corral-sandbox/corral/internal/relay"
	"github.com/corral-sandbox/corral/provider"
)

// relayArg runs the relay (internal/relay, docs/relay.md): the one process
// of an MXC sandbox, speaking frames with the host on its stdin/stdout.
const relayArg = "__relay"

// relayMain is `corral __relay`: 0 when the host ended the channel or on
// SIGTERM/SIGINT, 2 for misuse (arguments, a terminal on stdin), 120 when
// the channel broke. Everything it started is killed first.
func relayMain(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "corral __relay: takes no arguments")
		return 2
	}
	if term.IsTerminal(int(os.Stdin.Fd())) {
		fmt.Fprintln(os.Stderr, "corral __relay: speaks a protocol with corral on the host over stdin and stdout (docs/relay.md); it is not for use at a terminal")
		return 2
	}
	in, out, err := relay.TakeStdio()
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral __relay: %v\n", err)
		return provider.CodeInternal.ExitCode()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := relay.Serve(ctx, in, out); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "corral __relay: %v\n", err)
		return provider.CodeInternal.ExitCode()
	}
	return 0
}
