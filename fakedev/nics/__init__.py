"""Fake NICs on real netdevs: veth pairs whose node end lives in the emulated node's network namespace and whose
fabric end is a port on a bridge standing for the NIC's switch; assignment of names, MACs and addresses on prepare;
link watching for health (hot-unplug, carrier loss)."""
