"""A `fakedev plugin --no-api` process to fuzz: its roots in a private temp dir, its log, its memory, its files.

Without an API server every claim the plugin does not already hold fails to prepare with a per-claim error, which is
all the fuzzing of its sockets needs; a claim written into the checkpoint before the start is one it holds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fakedev.cli.rig import plugin_command
from fakedev.plugin.paths import PluginPaths
from harness.node.drivers import DriverContext, render_driver_argv
from harness.procs import wait_for

DRIVER: Final = "gpu.example.com"
NODE: Final = "n1"
LOG_LINE: Final = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} [DIWEC] [a-z_.]+ \S[^\n]*$")
"""A record of the text formatter; any other line on the plugin's stderr is something no log call wrote."""


def _kib(status: str, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, f"no {field} in /proc/<pid>/status"
    return int(match.group(1))


@dataclass(kw_only=True)
class FuzzedPlugin:
    base: Path
    """Holds the plugin's two roots (``k``, the kubelet root; ``cdi``) and its log; nothing else may appear."""
    popen: subprocess.Popen[bytes] | None = None

    @classmethod
    def create(cls) -> FuzzedPlugin:
        # Socket paths must stay under 108 bytes, so not below pytest's (possibly deep) temporary directories.
        return cls(base=Path(tempfile.mkdtemp(prefix="fz-")))

    @property
    def kubelet_root(self) -> Path:
        return self.base / "k"

    @property
    def cdi_dir(self) -> Path:
        return self.base / "cdi"

    @property
    def log_path(self) -> Path:
        return self.base / "plugin.log"

    @property
    def paths(self) -> PluginPaths:
        return PluginPaths(kubelet_root=self.kubelet_root, driver=DRIVER)

    def start(self) -> None:
        argv = render_driver_argv(
            plugin_command(profile="seed-example", api=False),
            context=DriverContext(
                node=NODE, kubelet_root=self.kubelet_root, cdi_dir=self.cdi_dir, kubeconfig=self.base / "unused"
            ),
        )
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", *argv], stdout=log, stderr=subprocess.STDOUT, env=os.environ
            )
        wait_for(
            lambda: "plugin ready" in self.log(),
            timeout=30,
            what="the fuzzed plugin to serve",
            abort=lambda: None if self.alive() else AssertionError(f"plugin exited:\n{self.log()}"),
        )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_kib(self) -> tuple[int, int]:
        """(current, peak) resident memory of the plugin process."""
        assert self.popen is not None
        status = Path(f"/proc/{self.popen.pid}/status").read_text()
        return _kib(status, "VmRSS"), _kib(status, "VmHWM")

    def tree(self) -> set[str]:
        """Every path below the base, relative to it."""
        return {str(p.relative_to(self.base)) for p in self.base.rglob("*")}

    def foreign_log_lines(self) -> list[str]:
        """Lines of the plugin's output that are not one well-formed record (a traceback, a forged or split line)."""
        return [line for line in self.log().splitlines() if not LOG_LINE.match(line)]

    def stop(self) -> None:
        if self.popen is not None and self.alive():
            self.popen.terminate()
            self.popen.wait(timeout=20)
        shutil.rmtree(self.base, ignore_errors=True)
