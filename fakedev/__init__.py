"""fakedev: emulated GPUs and NICs behind a real DRA kubelet plugin."""

__version__ = "0.1.0"
