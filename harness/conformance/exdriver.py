"""Build and run the kubelet plugin of ``sigs.k8s.io/dra-example-driver``: a DRA driver we did not write.

The conformance suite points our kubelet emulator at it to check that the emulator works with a real third-party
driver, not only with ``fakedev``. It is built from the Go module proxy through the wrapper module in
``gomod/dra-example-driver`` (the upstream go.mod has no replace directives, so a plain ``require`` suffices) by
:func:`harness.cluster.build.build_group`, and cached under ``<cache>/dra-example-driver/<version>/``. It needs no
cgo and builds with the shared flags (``CGO_ENABLED=0``, the control plane's build tags); cold, about 1.5 minutes on
2 cores, a 50 MB binary.

What v0.4.0 does (observed against our 1.37 control plane; it links ``k8s.io/dynamic-resource-allocation`` v0.36.2):

- **Command line.** ``urfave/cli``: every flag also reads an environment variable (``--node-name``/``NODE_NAME``,
  ``--cdi-root``/``CDI_ROOT``, ``--kubelet-registrar-directory-path``, ``--kubelet-plugins-directory-path``,
  ``--num-devices``, ``--device-profile`` (gpu|cpu|net), ``--driver-name`` (default ``<profile>.example.com``),
  ``--pod-uid``, ``--healthcheck-port``, ``--metrics-port``, ``--kubeconfig``/``KUBECONFIG``, ``--kube-api-qps``,
  ``--kube-api-burst``, ``--gpu-partitions``, ``--gpu-device-status``, ``--binding-conditions``,
  ``--gpu-allow-multiple-allocations``, ``--cpu-numa-nodes``, ``--cpus-per-numa-node`` and the logging flags ``-v``,
  ``--vmodule``, ``--logging-format``, ``--feature-gates`` (logging gates only, no DRA gates), ``--log-*``). A flag
  beats its variable, so we pass every path-like flag and scrub the variables (:data:`DRIVER_ENV_VARS`).
- **NODE_NAME is read twice.** The flag names the node, but the common CDI spec takes ``KUBERNETES_NODE_NAME`` from
  the ``NODE_NAME`` variable itself, so :func:`example_driver_env` sets it too.
- **Directories.** It creates ``<plugins>/<driver>/`` and the CDI dir, but *not* the registrar dir: without
  ``<root>/plugins_registry`` it exits 1 (``bind: no such file or directory``) and leaves ``dra.sock`` behind. The
  kubelet (or whoever plays it) must create that directory first.
- **Sockets.** ``<root>/plugins/gpu.example.com/dra.sock`` is served first, then
  ``<root>/plugins_registry/gpu.example.com-reg.sock``; with ``--pod-uid U`` (rolling update) they are
  ``dra-U.sock`` and ``gpu.example.com-U-reg.sock``. Both are removed on SIGTERM (exit 0 within milliseconds; a
  SIGTERM before the slice informer has synced exits 1).
- **Registration.** ``GetInfo`` → type ``DRAPlugin``, name ``gpu.example.com``, endpoint = the absolute ``dra.sock``
  path, ``supported_versions`` exactly ``["v1.DRAPlugin", "v1beta1.DRAPlugin"]``: no DRA health service, so a 1.37
  kubelet never opens ``NodeWatchResources``. Both DRA versions answer prepare and unprepare.
- **Health/metrics ports.** Off by default (``-1``). When enabled they listen on *every* interface (``[::]:port``;
  0 = a random port, only visible in the log), and there is no flag to bind 127.0.0.1, so we keep them off unless a
  caller opts in. The health port serves ``grpc.health.v1`` (services ``""`` and ``liveness``), which calls the
  plugin's own ``GetInfo`` and an empty ``NodePrepareResources``.
- **ResourceSlices.** One slice ``00000-gpu.example.com-<node>-<random>``, owned by the Node (``controller: true``).
  Without the Node it keeps running and registered, logging ``retrieve node … not found`` with exponential backoff,
  and publishes once the Node appears (seconds later, backoff permitting). Pool ``<node>`` generation 1,
  ``resourceSliceCount`` 1, devices ``gpu-0`` … ``gpu-<n-1>`` with attributes ``index`` (int), ``uuid`` (string,
  seeded by the node name), ``model`` (``LATEST-GPU-MODEL``), ``driverVersion`` (version ``1.0.0``), capacity
  ``memory`` 80Gi and ``compute`` 100, ``allowMultipleAllocations: false``. Slices stay after the plugin stops (the
  kubelet wipes them).
- **Prepare.** The helper GETs the claim (falling back to v1beta2 and v1beta1 on 404); a missing claim fails the
  whole RPC (gRPC ``UNKNOWN``), not just its entry. Each device returns two CDI IDs:
  ``k8s.gpu.example.com/gpu=common`` and ``k8s.gpu.example.com/gpu=<claimUID>-<device>``. Prepare is idempotent
  (``<plugins>/<driver>/checkpoint.json``); unpreparing an unknown claim succeeds. It writes no device-metadata
  files and, without ``--gpu-device-status``, no ``status.devices``.
- **CDI.** Kind ``k8s.gpu.example.com/gpu``, ``cdiVersion: 0.3.0``, YAML files ``k8s.gpu.example.com-gpu_common.yaml``
  (written at start-up, never removed) and ``k8s.gpu.example.com-gpu_<claimUID>.yaml`` (removed by unprepare).
  Env only, no mounts or device nodes. ``common`` injects ``KUBERNETES_NODE_NAME=<node>`` and
  ``DRA_RESOURCE_DRIVER_NAME=gpu.example.com``; each device ``gpu-N`` injects
  ``GPU_DEVICE_GPU_N_RESOURCE_CLAIM=<claimUID>``, ``DRA_ADMIN_ACCESS=false``, ``GPU_DEVICE_N=gpu-N``,
  ``GPU_DEVICE_N_SHARING_STRATEGY=TimeSlicing``, ``GPU_DEVICE_N_TIMESLICE_INTERVAL=Default``.
- **Objects and RBAC.** It needs no Namespace or other object of its own, only the Node. Its Helm chart grants:
  ``resourceclaims`` get/list/watch, ``resourceclaims/status`` update, ``resourceclaims/driver``
  ``associated-node:update|patch`` for its driver name, ``nodes`` get, ``resourceslices`` all verbs. Our admin
  kubeconfig covers all of it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePath
from typing import Final

from harness.cluster.build import (
    BinaryGroup,
    GoProgram,
    Progress,
    build_group,
    cache_entry,
    check_cache,
    default_cache_root,
)
from harness.errors import BuildError
from harness.node.drivers import DriverSpec

EXAMPLE_DRIVER_VERSION: Final = "v0.4.0"
"""The newest tag the Go module proxy serves (main had only dependency bumps past it and is not served)."""
KUBELET_PLUGIN: Final = "dra-example-kubeletplugin"
DRIVER_NAME: Final = "gpu.example.com"
DEVICE_PROFILE: Final = "gpu"
BUILD_COMMAND: Final = ".venv/bin/python -m harness.conformance.exdriver"

MAX_SOCKET_PATH: Final = 107
"""``sun_path`` holds 108 bytes including the terminating NUL."""
HOST_KUBELET_ROOT: Final = PurePath("/var/lib/kubelet")
HOST_CDI_DIRS: Final = (PurePath("/etc/cdi"), PurePath("/var/run/cdi"), PurePath("/run/cdi"))

DRIVER_ENV_VARS: Final = (
    "NODE_NAME",
    "CDI_ROOT",
    "NUM_DEVICES",
    "KUBELET_REGISTRAR_DIRECTORY_PATH",
    "KUBELET_PLUGINS_DIRECTORY_PATH",
    "HEALTHCHECK_PORT",
    "METRICS_PORT",
    "DEVICE_PROFILE",
    "DRIVER_NAME",
    "POD_UID",
    "GPU_PARTITIONS",
    "GPU_DEVICE_STATUS",
    "BINDING_CONDITIONS",
    "GPU_ALLOW_MULTIPLE_ALLOCATIONS",
    "CPU_NUMA_NODES",
    "CPUS_PER_NUMA_NODE",
    "KUBECONFIG",
    "KUBE_API_QPS",
    "KUBE_API_BURST",
    "FEATURE_GATES",
    "LOG_FLUSH_FREQUENCY",
    "LOG_JSON_INFO_BUFFER_SIZE",
    "LOG_JSON_SPLIT_STREAM",
    "LOG_TEXT_INFO_BUFFER_SIZE",
    "LOG_TEXT_SPLIT_STREAM",
    "LOGGING_FORMAT",
    "VMODULE",
    "V",
)
"""Every variable v0.4.0 reads as a flag default (from its ``--help``)."""
CLIENT_GO_FEATURE_PREFIX: Final = "KUBE_FEATURE_"
"""client-go reads its feature gates (``KUBE_FEATURE_WatchListClient`` …) from the environment."""


def wrapper_dir() -> Path:
    """The committed wrapper module (go.mod, go.sum, tools.go) that pins the driver and its dependencies."""
    return Path(str(resources.files("harness.conformance") / "gomod" / "dra-example-driver"))


EXAMPLE_DRIVER: Final = BinaryGroup(
    group="dra-example-driver",
    module="dra-example-driver",
    version=EXAMPLE_DRIVER_VERSION,
    programs=(GoProgram(name=KUBELET_PLUGIN, package="sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"),),
    # The plugin has no version variable to stamp (its Makefile's -X main.version matches nothing in it).
    version_ldflags=False,
    source=wrapper_dir(),
)


@dataclass(frozen=True, kw_only=True)
class ExampleDriverLayout:
    """Where the example driver puts its sockets and files under a private kubelet root and CDI dir."""

    kubelet_root: Path
    cdi_dir: Path
    driver_name: str = DRIVER_NAME
    pod_uid: str | None = None

    @property
    def registrar_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        return self.kubelet_root / "plugins"

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / self.driver_name

    @property
    def registration_socket(self) -> Path:
        uid = f"-{self.pod_uid}" if self.pod_uid else ""
        return self.registrar_dir / f"{self.driver_name}{uid}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / (f"dra-{self.pod_uid}.sock" if self.pod_uid else "dra.sock")

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / "checkpoint.json"

    @property
    def cdi_kind(self) -> str:
        return f"k8s.{self.driver_name}/{DEVICE_PROFILE}"

    @property
    def common_cdi_spec(self) -> Path:
        return self.cdi_dir / f"k8s.{self.driver_name}-{DEVICE_PROFILE}_common.yaml"

    def claim_cdi_spec(self, claim_uid: str) -> Path:
        return self.cdi_dir / f"k8s.{self.driver_name}-{DEVICE_PROFILE}_{claim_uid}.yaml"

    def cdi_device_ids(self, *, claim_uid: str, device: str) -> tuple[str, str]:
        """The CDI IDs prepare returns for one exclusively allocated device: the common one first."""
        return f"{self.cdi_kind}=common", f"{self.cdi_kind}={claim_uid}-{device}"


def _require_absolute(name: str, path: Path) -> None:
    # The driver resolves relative paths against its own working directory, which is not ours to rely on.
    if not path.is_absolute():
        raise ValueError(f"{name} must be an absolute path, got {str(path)!r}")


def _port_flag(name: str, port: int | None) -> str:
    if port is None:
        return "-1"
    if not 0 <= port <= 65535:
        raise ValueError(f"{name} must be None (disabled) or 0..65535, got {port}")
    return str(port)


def render_example_driver_args(
    *,
    binary: Path,
    node_name: str,
    kubelet_root: Path,
    cdi_dir: Path,
    kubeconfig: Path,
    num_devices: int = 8,
    driver_name: str = DRIVER_NAME,
    pod_uid: str | None = None,
    healthcheck_port: int | None = None,
    metrics_port: int | None = None,
    verbosity: int = 0,
) -> list[str]:
    """The plugin's argv for a private kubelet root and CDI dir; every path flag is explicit so no default applies.

    ``healthcheck_port``/``metrics_port``: ``None`` disables the server; an int (0 = random) enables it on every
    interface, because the driver cannot bind to loopback only.
    """
    paths = {"binary": binary, "kubelet_root": kubelet_root, "cdi_dir": cdi_dir, "kubeconfig": kubeconfig}
    for name, path in paths.items():
        _require_absolute(name, path)
    # Never let a test driver register with, or write CDI specs for, the host's real kubelet and runtime.
    if PurePath(kubelet_root) == HOST_KUBELET_ROOT:
        raise ValueError(f"kubelet_root must be a private directory, not the host's {HOST_KUBELET_ROOT}")
    if PurePath(cdi_dir) in HOST_CDI_DIRS:
        raise ValueError(f"cdi_dir must be a private directory, not the host's {cdi_dir}")
    if not node_name:
        raise ValueError("node_name must not be empty")
    if num_devices < 0:
        raise ValueError(f"num_devices must be >= 0, got {num_devices}")
    if verbosity < 0:
        raise ValueError(f"verbosity must be >= 0, got {verbosity}")
    layout = ExampleDriverLayout(kubelet_root=kubelet_root, cdi_dir=cdi_dir, driver_name=driver_name, pod_uid=pod_uid)
    for sock in (layout.registration_socket, layout.dra_socket):
        if len(str(sock).encode()) > MAX_SOCKET_PATH:
            raise ValueError(f"socket path {sock} is longer than {MAX_SOCKET_PATH} bytes; use a shorter kubelet_root")
    argv = [
        str(binary),
        "--node-name",
        node_name,
        "--kubeconfig",
        str(kubeconfig),
        "--device-profile",
        DEVICE_PROFILE,
        "--driver-name",
        driver_name,
        "--num-devices",
        str(num_devices),
        "--cdi-root",
        str(cdi_dir),
        "--kubelet-registrar-directory-path",
        str(layout.registrar_dir),
        "--kubelet-plugins-directory-path",
        str(layout.plugins_dir),
        "--healthcheck-port",
        _port_flag("healthcheck_port", healthcheck_port),
        "--metrics-port",
        _port_flag("metrics_port", metrics_port),
        "-v",
        str(verbosity),
    ]
    if pod_uid:
        argv += ["--pod-uid", pod_uid]
    return argv


def example_driver_env(*, base: Mapping[str, str], node_name: str) -> dict[str, str]:
    """``base`` without anything the driver would take as configuration, plus the ``NODE_NAME`` its CDI spec reads."""
    env = {
        key: value
        for key, value in base.items()
        if key not in DRIVER_ENV_VARS and not key.startswith(CLIENT_GO_FEATURE_PREFIX)
    }
    env["NODE_NAME"] = node_name
    return env


def example_driver_spec(*, num_devices: int = 8, cache_root: Path | None = None) -> DriverSpec:
    """The example driver as a :class:`DriverSpec` for emulated nodes and the conformance suite."""
    binary = example_driver_binary(cache_root=cache_root)
    return DriverSpec(
        argv=lambda ctx: render_example_driver_args(
            binary=binary,
            node_name=ctx.node,
            kubelet_root=ctx.kubelet_root,
            cdi_dir=ctx.cdi_dir,
            kubeconfig=ctx.kubeconfig,
            num_devices=num_devices,
        ),
        env=lambda ctx: example_driver_env(base=os.environ, node_name=ctx.node),
        description=f"sigs.k8s.io/dra-example-driver {EXAMPLE_DRIVER.version} kubelet plugin",
    )


def build_example_driver(*, progress: Progress, cache_root: Path | None = None, force: bool = False) -> Path:
    """The cached kubelet plugin binary, built first (about 1.5 min cold on 2 cores) when missing, stale or corrupt."""
    root = cache_root or default_cache_root()
    lock_path = cache_entry(group=EXAMPLE_DRIVER, cache_root=root).parent / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # Test workers may ask at once; build_group replaces the entry directory, which must not happen under a reader.
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        binaries = build_group(group=EXAMPLE_DRIVER, cache_root=root, progress=progress, force=force)
    return binaries.path(KUBELET_PLUGIN)


def example_driver_binary(*, cache_root: Path | None = None) -> Path:
    """The cached kubelet plugin binary, or a :class:`BuildError` saying how to build it."""
    root = cache_root or default_cache_root()
    if (reason := check_cache(group=EXAMPLE_DRIVER, cache_root=root)) is not None:
        raise BuildError(
            f"{EXAMPLE_DRIVER.group} {EXAMPLE_DRIVER.version} is not usable ({reason}); run `{BUILD_COMMAND}`"
        )
    return cache_entry(group=EXAMPLE_DRIVER, cache_root=root) / KUBELET_PLUGIN


def main() -> None:
    """Build (or reuse) the plugin and print its path: the hook for ``make``."""
    print(build_example_driver(progress=lambda message: print(message, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    main()
