"""A real node (kubelet + containerd built from Go modules) next to the emulated ones: the emulator's oracle."""
