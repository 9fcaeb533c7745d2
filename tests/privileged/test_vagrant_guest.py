"""The VM's guest script (``vagrant/guest/fakedev-vm``) on this host, as the VM's systemd units run it, minus the VM:
``cluster-up``, ``node`` and ``forward`` started here, ``host-kubeconfig`` read back, and the venv's kubectl reaching
the control plane through the forward with that kubeconfig alone — what the host's kubectl does once the provider
forwards the port (here the host port and the guest port are one: no provider in between).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
import yaml

from harness.procs import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.privileged]

SCRIPT: Final = Path(__file__).resolve().parents[2] / "vagrant" / "guest" / "fakedev-vm"
VENV: Final = Path(sys.executable).parent.parent
"""The venv running the tests stands in for the VM's /opt/fakedev/venv (fakedev and kubectl)."""
NODE: Final = "fakedev-vm-node"


@dataclass(frozen=True, kw_only=True)
class Guest:
    env: dict[str, str]
    port: int
    kubeconfig: Path

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(VENV / "bin" / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _script(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"fakedev-vm {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    tmp = tmp_path_factory.mktemp("vm")
    port = _free_port()
    defaults = tmp / "fakedev-vm"
    defaults.write_text(
        f"FAKEDEV_VM_VENV={VENV}\nFAKEDEV_VM_HOST_API_PORT={port}\nFAKEDEV_VM_GUEST_API_PORT={port}\n"
        "FAKEDEV_VM_PROFILE=seed-example\n"
    )
    # The script's own settings file, and a state directory of the test's: `fakedev cluster up` here is not the
    # machine's default cluster.
    env = {**os.environ, "FAKEDEV_VM_DEFAULTS": str(defaults), "XDG_STATE_HOME": str(tmp / "state")}
    env.pop("KUBECONFIG", None)
    _script("cluster-up", env=env)
    started: list[subprocess.Popen[str]] = []
    try:
        for verb in ("forward", "node"):
            started.append(
                subprocess.Popen(
                    [str(SCRIPT), verb], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True
                )
            )
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(_script("host-kubeconfig", env=env))
        yield Guest(env=env, port=port, kubeconfig=kubeconfig)
    finally:
        for proc in reversed(started):
            _stop(proc)
        _script("cluster-down", env=env)


def test_the_host_kubeconfig_carries_its_certificates_and_the_host_port(guest: Guest) -> None:
    config = yaml.safe_load(guest.kubeconfig.read_text())
    (cluster,) = config["clusters"]
    (user,) = config["users"]
    assert cluster["cluster"]["server"] == f"https://127.0.0.1:{guest.port}"
    assert cluster["cluster"]["certificate-authority-data"]
    assert user["user"]["client-certificate-data"] and user["user"]["client-key-data"]
    # No file paths: the VM's files are not on the host.
    assert not {"certificate-authority", "client-certificate", "client-key"} & {*cluster["cluster"], *user["user"]}


def test_kubectl_reaches_the_api_server_through_the_forward(guest: Guest) -> None:
    wait_for(
        lambda: guest.kubectl("get", "--raw", "/readyz").stdout == "ok",
        timeout=30,
        what="kube-apiserver's /readyz through socat",
    )
    version = guest.kubectl("version", "-o", "yaml")
    assert yaml.safe_load(version.stdout)["serverVersion"]["gitVersion"] == "v1.37.2", version.stderr


def test_kubectl_sees_the_emulated_node_ready_with_its_slices(guest: Guest) -> None:
    def ready() -> bool:
        done = guest.kubectl("get", "node", NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
        return done.stdout == "True"

    def sliced() -> bool:
        done = guest.kubectl("get", "resourceslices", "-o", "jsonpath={.items[*].spec.nodeName}")
        return NODE in done.stdout.split()

    wait_for(ready, timeout=90, what=f"Node {NODE} Ready, seen through the forward")
    wait_for(sliced, timeout=60, what=f"the fake plugin's ResourceSlices for {NODE}")
