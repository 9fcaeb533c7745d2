"""An emulated node's files: where each thing lives, decided here and nowhere else.

A node's directory ``<base>/fakedev-node-<hash of the node name>`` doubles as its kubelet root
(``plugins_registry/``, ``plugins/``), its CDI directory (``cdi/``), its state (``emulator/``: the DRA manager's
checkpoint, the boot marker, one directory per pod) and its runc root (``runc/``). Everything else — the emulator,
the pod workers, the CLI, KubeVirt verification, the conformance suite — asks this module for a path; nobody builds
one by hand or parses a name back.

Per pod: ``emulator/pods/<pod uid>/containers/<container>/<attempt>/`` is one container run's OCI bundle (its
``config.json``, ``rootfs/``, ``log`` and ``exit``), ``netdevices.json`` records the interfaces the runtime moved into
the sandbox, ``cdi-ids/<container>`` the CDI devices a container got.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.procs import default_run_base
from harness.runtime.netns import delete_netns, list_netns, netns_name
from harness.runtime.runc import LOG_FILE, clean_runc_root

ROOT_PREFIX: Final = "fakedev-node-"
CONTAINER_ID_MAX: Final = 120
SANDBOX_MARK: Final = "pod"
"""Sandbox namespaces are ``fakedev-<node run id>-pod-<uid prefix>``: a node's other namespaces (its NIC hardware)
carry the same run id and must survive a reboot."""
_UID_PREFIX: Final = 13


def node_run_id(name: str) -> str:
    """A short stable id per node name, so the node's directory and namespaces survive emulator restarts."""
    return hashlib.sha256(name.encode()).hexdigest()[:8]


@dataclass(frozen=True, kw_only=True)
class ContainerRunFiles:
    """One run (attempt) of a container: its OCI bundle directory."""

    attempt: int
    bundle: Path

    @property
    def log(self) -> Path:
        return self.bundle / LOG_FILE


@dataclass(frozen=True, kw_only=True)
class PodLayout:
    """One pod's files on its node, and the names of its sandbox and containers."""

    node_run_id: str
    uid: str
    dir: Path

    @property
    def sandbox_netns(self) -> str:
        return netns_name(run_id=self.node_run_id, suffix=f"{SANDBOX_MARK}-{self.uid[:_UID_PREFIX]}")

    @property
    def net_devices_record(self) -> Path:
        return self.dir / "netdevices.json"

    def cdi_ids_file(self, container: str) -> Path:
        return self.dir / "cdi-ids" / container

    def container_id(self, *, container: str, attempt: int) -> str:
        """The runc container ID of one run; stable, so a restarted emulator finds its containers again."""
        return f"{self.node_run_id}-{self.uid[:_UID_PREFIX]}-{container}-{attempt}"[:CONTAINER_ID_MAX]

    def bundle(self, *, container: str, attempt: int) -> ContainerRunFiles:
        return ContainerRunFiles(attempt=attempt, bundle=self.dir / "containers" / container / str(attempt))

    def runs(self, container: str) -> list[ContainerRunFiles]:
        """Every run of ``container`` with a bundle on disk, oldest first."""
        parent = self.dir / "containers" / container
        if not parent.is_dir():
            return []
        attempts = sorted(int(p.name) for p in parent.iterdir() if p.is_dir() and p.name.isdigit())
        return [self.bundle(container=container, attempt=a) for a in attempts]

    def latest_run(self, container: str) -> ContainerRunFiles | None:
        runs = self.runs(container)
        return runs[-1] if runs else None

    def latest_log(self, container: str) -> str | None:
        """The newest run's output of ``container``, or None when it has not run (or is being created)."""
        latest = self.latest_run(container)
        if latest is None:
            return None
        try:
            return latest.log.read_text(errors="replace")
        except FileNotFoundError:
            return None


@dataclass(frozen=True, kw_only=True)
class NodeLayout:
    """An emulated node's directory and everything in it."""

    name: str
    root: Path

    @classmethod
    def for_node(cls, name: str, *, base: Path | None = None) -> NodeLayout:
        return cls(name=name, root=(base or default_run_base()) / f"{ROOT_PREFIX}{node_run_id(name)}")

    @property
    def run_id(self) -> str:
        return node_run_id(self.name)

    @property
    def base(self) -> Path:
        return self.root.parent

    @property
    def kubelet_root(self) -> Path:
        return self.root

    @property
    def registry(self) -> Path:
        """``plugins_registry/``: where drivers put their registration sockets."""
        return self.root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        """``plugins/``: drivers' own directories (their DRA sockets, checkpoints, data)."""
        return self.root / "plugins"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def state(self) -> Path:
        return self.root / "emulator"

    @property
    def dra_checkpoint(self) -> Path:
        """The DRA manager's checkpoint (the kubelet's ``dra_manager_state``)."""
        return self.state / "dra_manager_state"

    @property
    def boot_id(self) -> Path:
        """Present while the node is "powered": a missing marker means a new boot (see :meth:`power_off`)."""
        return self.state / "boot_id"

    @property
    def runc(self) -> Path:
        return self.root / "runc"

    @property
    def cache(self) -> Path:
        """Root filesystem templates, when the settings name no shared cache."""
        return self.root / "cache"

    @property
    def pods(self) -> Path:
        return self.state / "pods"

    def pod(self, uid: str) -> PodLayout:
        return PodLayout(node_run_id=self.run_id, uid=uid, dir=self.pods / uid)

    def make_dirs(self) -> None:
        for d in (self.registry, self.plugins, self.cdi, self.pods):
            d.mkdir(parents=True, exist_ok=True)

    def sandboxes(self) -> list[str]:
        """The pod sandbox namespaces of this node that exist now."""
        return list_netns(netns_name(run_id=self.run_id, suffix=f"{SANDBOX_MARK}-"))

    def power_off(self) -> None:
        """What losing power takes from a stopped node: containers, sandboxes, CDI specs (``/var/run/cdi`` is a
        tmpfs), runtime state and the boot marker. Disks stay: checkpoints, pod directories, plugin data."""
        clean_runc_root(self.runc)
        shutil.rmtree(self.runc, ignore_errors=True)
        for name in self.sandboxes():
            delete_netns(name)
        if self.cdi.is_dir():
            for spec in self.cdi.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    spec.unlink()
        if self.pods.is_dir():
            # What a sandbox held went with it: a record left behind would tell the next sandbox its NICs are in.
            for pod in self.pods.iterdir():
                self.pod(pod.name).net_devices_record.unlink(missing_ok=True)
        self.boot_id.unlink(missing_ok=True)
