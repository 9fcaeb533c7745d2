//go:build tools

// Package tools pins runc's command for `go build` through this module (go.sum holds every dependency).
package tools

import (
	_ "github.com/opencontainers/runc"
)
