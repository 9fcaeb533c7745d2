//go:build tools

// Package tools pins the DRA example driver's kubelet plugin, which the conformance suite runs as a driver we did not
// write; `go mod tidy` keeps go.sum complete for it.
package tools

import _ "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"
