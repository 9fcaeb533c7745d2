"""What a container runtime does for the node emulator: sandboxes (network namespaces), OCI specs, runc."""
