"""Running a DRA driver's kubelet plugin for an emulated node, whoever wrote it.

A driver is a command line with placeholders the harness fills per node — ``{node}``, ``{kubelet_root}``,
``{registry_dir}``, ``{plugins_dir}``, ``{cdi_dir}``, ``{kubeconfig}`` — and the same values in its environment
(``NODE_NAME``, ``KUBELET_ROOT``, ``KUBELET_REGISTRAR_DIRECTORY_PATH``, ``KUBELET_PLUGINS_DIRECTORY_PATH``,
``CDI_ROOT``, ``KUBECONFIG``), the way a DaemonSet would get them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ComponentError
from harness.procs import Process, RunDir, start_process


@dataclass(frozen=True, kw_only=True)
class DriverContext:
    node: str
    kubelet_root: Path
    cdi_dir: Path
    kubeconfig: Path

    def values(self) -> dict[str, str]:
        return {
            "node": self.node,
            "kubelet_root": str(self.kubelet_root),
            "registry_dir": str(self.kubelet_root / "plugins_registry"),
            "plugins_dir": str(self.kubelet_root / "plugins"),
            "cdi_dir": str(self.cdi_dir),
            "kubeconfig": str(self.kubeconfig),
        }

    def env(self) -> dict[str, str]:
        v = self.values()
        return {
            "NODE_NAME": v["node"],
            "KUBELET_ROOT": v["kubelet_root"],
            "KUBELET_REGISTRAR_DIRECTORY_PATH": v["registry_dir"],
            "KUBELET_PLUGINS_DIRECTORY_PATH": v["plugins_dir"],
            "CDI_ROOT": v["cdi_dir"],
            "KUBECONFIG": v["kubeconfig"],
        }


def render_driver_argv(template: tuple[str, ...], *, context: DriverContext) -> list[str]:
    """Fill the placeholders; an unknown ``{name}`` is an error naming it."""
    values = context.values()
    out = []
    for arg in template:
        try:
            out.append(arg.format(**values))
        except (KeyError, IndexError, ValueError) as exc:
            raise ComponentError(
                f"driver command argument {arg!r}: unknown placeholder {exc} (known: {', '.join(sorted(values))})"
            ) from exc
    return out


@dataclass(frozen=True, kw_only=True)
class DriverSpec:
    """How to run a driver for a node: its argv and environment, computed from the node's context."""

    argv: Callable[[DriverContext], list[str]]
    env: Callable[[DriverContext], dict[str, str]]
    description: str


def template_driver(template: tuple[str, ...]) -> DriverSpec:
    """A driver given as a command line with placeholders, getting the standard environment on top of ours."""
    return DriverSpec(
        argv=lambda ctx: render_driver_argv(template, context=ctx),
        env=lambda ctx: {**os.environ, **ctx.env()},
        description=" ".join(template),
    )


@dataclass(kw_only=True)
class DriverProcess:
    """One driver process for one node; restartable, killable, stoppable — what drills need."""

    name: str
    spec: DriverSpec
    context: DriverContext
    run: RunDir
    process: Process | None = None
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.run.path / "logs" / f"{self.name}.log"

    def start(self) -> None:
        argv = self.spec.argv(self.context)
        env = self.spec.env(self.context)
        self.process = start_process(name=self.name, argv=argv, run=self.run, log_path=self.log_path, env=env)
        self.starts += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def signal(self, sig: int) -> None:
        if self.process is not None:
            self.process.signal(sig)

    def kill(self) -> None:
        if self.process is not None:
            self.process.signal(signal.SIGKILL)
            self.process.popen.wait(timeout=10)

    def stop(self, *, timeout: float = 10.0) -> None:
        if self.process is not None and self.process.alive():
            self.process.signal(signal.SIGCONT)  # a hung (SIGSTOPped) driver cannot handle SIGTERM otherwise
            self.process.stop(timeout=timeout)

    def restart(self) -> None:
        self.stop()
        self.start()
