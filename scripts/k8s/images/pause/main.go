// Command pause is the pod sandbox's process for the test cluster
// scripts/k8s/up.sh starts: it holds the pod's namespaces open, reaps the
// children it is given (as PID 1 of a pod with a shared PID namespace) and
// exits 0 on SIGINT or SIGTERM, as the upstream pause container does
// (kubernetes/build/pause/linux/pause.c). Linux only; standard library only.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
