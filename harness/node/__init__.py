"""The node emulator: the kubelet's plugin manager, DRA manager and pod lifecycle, for any DRA driver."""
