"""The device model: pure data describing a node's GPUs, MIG/vGPU partitions, NICs and PCI/NUMA topology.

Nothing in this package reads files, opens sockets or starts processes; profiles arrive as text and leave as
immutable objects (see :mod:`fakedev.model.profile` and :mod:`fakedev.model.inventory`).
"""
