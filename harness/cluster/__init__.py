"""A real Kubernetes 1.37 control plane: build from Go modules, run locally, register emulated nodes."""
