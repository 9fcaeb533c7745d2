//go:build tools

// Package tools pins the etcd server fakedev builds; `go mod tidy` keeps go.sum complete for it.
package tools

import _ "go.etcd.io/etcd/server/v3"
