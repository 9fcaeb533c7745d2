"""A timing hook for ``make bench``: how long resolving and rendering many nodes of one profile takes."""

from __future__ import annotations

import time

from fakedev.model.inventory import resolve_inventory
from fakedev.model.profile import NodeProfile


def bench_render(nodes: int, *, profile: NodeProfile | None = None) -> float:
    """Seconds to resolve and render ``nodes`` distinct nodes (``bench-node-<i>``) of ``profile`` (default dgx-h100).

    Each node gets its own identities, so nothing is cached between nodes; loading the profile is not timed.
    """
    from fakedev.render import render_node  # late: fakedev.render imports this module

    if profile is None:
        # The only file read here, and outside the timed section: the built-in profile's YAML.
        from fakedev.profiles import load_profile

        profile = load_profile("dgx-h100")
    started = time.perf_counter()
    for i in range(nodes):
        render_node(resolve_inventory(profile, node_name=f"bench-node-{i}"))
    return time.perf_counter() - started
