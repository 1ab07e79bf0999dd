//go:build !linux

package main

import (
	"fmt"
	"os"

	"github.com/corral-sandbox/corral/provider"
)

// registry holds the providers compiled into this binary.
var registry = []provider.Provider{mxcProvider()}

func osEntry() {}

// takeFDs: passing extra fds is a Linux feature.
func takeFDs(n int) ([]*os.File, error) {
	if n != 0 {
		return nil, fmt.Errorf("--preserve-fds is not supported on this OS")
	}
	return nil, nil
}

// attachTerminal: -t needs a Linux provider.
func attachTerminal() (func(), <-chan [2]uint16) {
	c := make(chan [2]uint16)
	close(c)
	return func() {}, c
}
