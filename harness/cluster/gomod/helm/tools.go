//go:build tools

// Package tools pins Helm's command for `go build` through this module (go.sum holds every dependency).
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
