// Command pause is the sandbox ("pause") container of fakedev's real node: it holds the pod's namespaces, reaps
// orphaned children and exits 0 on SIGTERM or SIGINT. Standard library only, built statically.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			for {
				var status syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", sig)
		os.Exit(0)
	}
}
