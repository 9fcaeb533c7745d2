// grpc-floor serves gRPC's standard health service on a Unix socket and nothing else: `fakedev bench` times a
// call to it from the same Python client that times the DRA drivers, so the figure is the cost of a grpc-go
// server's round trip with no work in the handler (what every call of a Go driver pays before its own work).
package main

import (
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: grpc-floor SOCKET")
		os.Exit(2)
	}
	listener, err := net.Listen("unix", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server := grpc.NewServer()
	healthpb.RegisterHealthServer(server, health.NewServer())
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
