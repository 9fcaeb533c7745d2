"""KubeVirt PCI attribute verification: what virt-launcher reads from DRA device metadata, checked against the node."""
