"""Run node emulators on an event loop in a background thread, for synchronous callers (tests, drills)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from harness.cluster.nodes import NodeHeartbeats
from harness.errors import HarnessError
from harness.node.emulator import NodeEmulator, NodeSettings
from harness.node.layout import NodeLayout
from kubeclient import KubeClient

T = TypeVar("T")
EXECUTOR_THREADS: Final = 64


@dataclass(kw_only=True)
class BackgroundLoop:
    """An asyncio loop in a daemon thread; ``call`` runs a coroutine there and waits for its result."""

    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        # Pod workers run API calls, runc and netlink in threads; the default pool (cpus + 4) is too small for a node.
        self.loop.set_default_executor(ThreadPoolExecutor(max_workers=EXECUTOR_THREADS, thread_name_prefix="node"))
        self._thread = threading.Thread(target=self.loop.run_forever, name="emulator-loop", daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], *, timeout: float = 120.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            future.cancel()
            raise HarnessError(
                f"timed out after {timeout:.0f}s on the emulator loop; pending:\n{self.pending()}"
            ) from None

    def pending(self) -> str:
        """Where every task of the loop waits — for the message of a timeout."""
        out = []
        for task in asyncio.all_tasks(self.loop):
            frames = task.get_stack(limit=3)
            where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in frames) or "?"
            out.append(f"  {task.get_name()}: {where}")
        return "\n".join(sorted(out))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.loop.close()


@dataclass(kw_only=True)
class BackgroundNode:
    """One emulated node on a background loop; ``restart()`` is a kubelet restart (containers keep running),
    ``reboot()`` a power cycle."""

    settings: NodeSettings
    client: KubeClient
    loop: BackgroundLoop
    heartbeats: NodeHeartbeats | None = None
    """Shared by the nodes of one process (one thread renews every Lease); None: the node keeps its own."""
    node: NodeEmulator | None = None

    def start(self) -> NodeEmulator:
        self.node = NodeEmulator(settings=self.settings, client=self.client, heartbeats=self.heartbeats)
        self.loop.call(self.node.start())
        return self.node

    def stop(self, *, stop_pods: bool = False) -> None:
        if self.node is not None:
            node, self.node = self.node, None
            try:
                self.loop.call(node.stop(stop_pods=stop_pods))
            finally:
                node.run.close()  # even when stopping failed, the run's lock must not leak

    def restart(self) -> NodeEmulator:
        self.stop()
        return self.start()

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout.for_node(self.settings.name, base=self.settings.base)

    def reboot(self, *, while_off: Callable[[], None] = lambda: None) -> NodeEmulator:
        """Power-cycle the node: the kubelet stops without stopping pods (the power is cut), everything volatile
        goes (:meth:`NodeLayout.power_off`), ``while_off`` restores what comes back by itself (hardware), and the
        node boots: its emulator prepares every claim again before restarting the pods."""
        self.stop(stop_pods=False)
        self.layout.power_off()
        while_off()
        return self.start()
