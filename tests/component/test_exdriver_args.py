"""How we run the DRA example driver: its argv, its environment, its file layout, and the pinned wrapper module."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.conformance.exdriver import (
    BUILD_COMMAND,
    DRIVER_ENV_VARS,
    EXAMPLE_DRIVER,
    EXAMPLE_DRIVER_VERSION,
    ExampleDriverLayout,
    example_driver_binary,
    example_driver_env,
    render_example_driver_args,
    wrapper_dir,
)
from harness.errors import BuildError

ROOT = Path("/tmp/fd-x/kubelet")
CDI = Path("/tmp/fd-x/cdi")
KUBECONFIG = Path("/tmp/fd-run/kubeconfig")
BINARY = Path("/cache/dra-example-kubeletplugin")


def _render(**overrides: Any) -> list[str]:
    kwargs: dict[str, Any] = {
        "binary": BINARY,
        "node_name": "node-a",
        "kubelet_root": ROOT,
        "cdi_dir": CDI,
        "kubeconfig": KUBECONFIG,
    }
    kwargs.update(overrides)
    return render_example_driver_args(**kwargs)


def _flags(argv: list[str]) -> dict[str, str]:
    """``--flag value`` pairs after the binary (the renderer never uses ``--flag=value``)."""
    rest = argv[1:]
    assert len(rest) % 2 == 0, rest
    return dict(zip(rest[::2], rest[1::2], strict=True))


def test_every_path_flag_points_into_the_private_root() -> None:
    argv = _render()
    assert argv[0] == str(BINARY)
    flags = _flags(argv)
    assert flags["--kubelet-registrar-directory-path"] == f"{ROOT}/plugins_registry"
    assert flags["--kubelet-plugins-directory-path"] == f"{ROOT}/plugins"
    assert flags["--cdi-root"] == str(CDI)
    assert flags["--kubeconfig"] == str(KUBECONFIG)
    assert (flags["--node-name"], flags["--driver-name"], flags["--device-profile"]) == (
        "node-a",
        "gpu.example.com",
        "gpu",
    )
    assert flags["--num-devices"] == "8"
    assert "--pod-uid" not in flags


@pytest.mark.parametrize(
    ("port", "flag"),
    [(None, "-1"), (0, "0"), (9444, "9444")],
    ids=["disabled-by-default", "random-port", "fixed-port"],
)
def test_health_and_metrics_servers_are_off_unless_asked(port: int | None, flag: str) -> None:
    flags = _flags(_render(healthcheck_port=port, metrics_port=port))
    assert (flags["--healthcheck-port"], flags["--metrics-port"]) == (flag, flag)


def test_rolling_update_uid_is_passed_and_renames_the_sockets() -> None:
    flags = _flags(_render(pod_uid="u1"))
    layout = ExampleDriverLayout(kubelet_root=ROOT, cdi_dir=CDI, pod_uid="u1")
    assert flags["--pod-uid"] == "u1"
    assert layout.registration_socket == ROOT / "plugins_registry" / "gpu.example.com-u1-reg.sock"
    assert layout.dra_socket == ROOT / "plugins" / "gpu.example.com" / "dra-u1.sock"


def test_layout_names_the_sockets_and_cdi_files_the_driver_creates() -> None:
    layout = ExampleDriverLayout(kubelet_root=ROOT, cdi_dir=CDI)
    assert layout.registration_socket == ROOT / "plugins_registry" / "gpu.example.com-reg.sock"
    assert layout.dra_socket == ROOT / "plugins" / "gpu.example.com" / "dra.sock"
    assert layout.checkpoint == ROOT / "plugins" / "gpu.example.com" / "checkpoint.json"
    assert layout.common_cdi_spec == CDI / "k8s.gpu.example.com-gpu_common.yaml"
    assert layout.claim_cdi_spec("uid-1") == CDI / "k8s.gpu.example.com-gpu_uid-1.yaml"
    assert layout.cdi_device_ids(claim_uid="uid-1", device="gpu-3") == (
        "k8s.gpu.example.com/gpu=common",
        "k8s.gpu.example.com/gpu=uid-1-gpu-3",
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kubelet_root": Path("relative/kubelet")}, "kubelet_root must be an absolute path"),
        ({"kubeconfig": Path("kubeconfig")}, "kubeconfig must be an absolute path"),
        ({"kubelet_root": Path("/var/lib/kubelet")}, "not the host's /var/lib/kubelet"),
        ({"cdi_dir": Path("/var/run/cdi")}, "not the host's /var/run/cdi"),
        ({"cdi_dir": Path("/etc/cdi")}, "not the host's /etc/cdi"),
        ({"kubelet_root": Path("/tmp/" + "d" * 80)}, "longer than 107 bytes"),
        ({"num_devices": -1}, "num_devices must be >= 0"),
        ({"healthcheck_port": 70000}, "healthcheck_port must be None"),
        ({"metrics_port": -1}, "metrics_port must be None"),
        ({"node_name": ""}, "node_name must not be empty"),
    ],
    ids=[
        "relative-root",
        "relative-kubeconfig",
        "host-kubelet-root",
        "host-cdi-run",
        "host-cdi-etc",
        "socket-too-long",
        "negative-devices",
        "port-out-of-range",
        "negative-port",
        "empty-node",
    ],
)
def test_bad_input_is_refused_naming_the_parameter(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _render(**overrides)


def test_env_drops_what_the_driver_would_read_and_sets_node_name() -> None:
    base = dict.fromkeys(DRIVER_ENV_VARS, "leaked") | {
        "KUBE_FEATURE_WatchListClient": "false",
        "PATH": "/usr/bin",
        "HOME": "/root",
    }
    assert example_driver_env(base=base, node_name="node-a") == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "NODE_NAME": "node-a",
    }


def test_env_does_not_modify_its_input() -> None:
    base = {"NODE_NAME": "other", "V": "9"}
    example_driver_env(base=base, node_name="node-a")
    assert base == {"NODE_NAME": "other", "V": "9"}


def test_wrapper_module_pins_the_version_and_the_plugin_package() -> None:
    src = wrapper_dir()
    gomod = (src / "go.mod").read_text()
    assert re.search(rf"^require sigs\.k8s\.io/dra-example-driver {re.escape(EXAMPLE_DRIVER_VERSION)}$", gomod, re.M)
    # Upstream v0.4.0 needs no replace directives; a new one would mean the pin drifted from what we verified.
    assert "replace" not in gomod
    tools = (src / "tools.go").read_text()
    assert tools.startswith("//go:build tools\n")
    (program,) = EXAMPLE_DRIVER.programs
    assert f'import _ "{program.package}"' in tools
    assert (src / "go.sum").read_text().count(f"sigs.k8s.io/dra-example-driver {EXAMPLE_DRIVER_VERSION}") == 2


def test_missing_binary_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=re.escape(BUILD_COMMAND)):
        example_driver_binary(cache_root=tmp_path)
