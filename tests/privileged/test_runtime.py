"""The emulated container runtime: busybox under real runc, in a network namespace of our own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.procs import RunDir, open_run_dir
from harness.reaper import reap_all
from harness.runtime.netns import create_netns, delete_netns, list_run_netns, netns_name
from harness.runtime.oci import render_container_spec
from harness.runtime.rootfs import clone_rootfs, ensure_rootfs
from harness.runtime.runc import Runc

pytestmark = pytest.mark.privileged


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunDir]:
    rd = open_run_dir(purpose="rt", base=tmp_path)
    yield rd
    rd.remove()


@pytest.fixture
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_rootfs(cache_root=tmp_path_factory.mktemp("cache"))


def test_container_runs_in_the_pod_network_namespace(run: RunDir, template: Path) -> None:
    name = netns_name(run_id=run.run_id, suffix="pod")
    path = create_netns(name)
    try:
        rootfs = clone_rootfs(template=template, destination=run.path / "c1" / "rootfs")
        spec = render_container_spec(
            args=["sh", "-c", "echo hello $GREETING; ip -o link; hostname"],
            env={"GREETING": "world"},
            rootfs=rootfs,
            hostname="pod-a",
            netns_path=path,
        )
        container = Runc.for_run(run).run(container_id=f"{run.run_id}-c1", bundle=run.path / "c1", spec=spec, run=run)
        assert container.wait(timeout=30) == 0
        container.stop()
        lines = container.log_path.read_text().splitlines()
        assert lines[0] == "hello world"
        assert [line.split(":")[1].strip() for line in lines[1:-1]] == ["lo"]
        assert lines[-1] == "pod-a"
    finally:
        delete_netns(name)


def test_exit_code_is_the_containers(run: RunDir, template: Path) -> None:
    rootfs = clone_rootfs(template=template, destination=run.path / "c2" / "rootfs")
    spec = render_container_spec(args=["sh", "-c", "exit 7"], env={}, rootfs=rootfs, hostname="x", netns_path=None)
    container = Runc.for_run(run).run(container_id=f"{run.run_id}-c2", bundle=run.path / "c2", spec=spec, run=run)
    assert container.wait(timeout=30) == 7
    container.stop()


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param("emulator", id="a node emulator's runc root"),
        # The root a real node's containerd is given; its shim adds a directory per containerd namespace.
        pytest.param("containerd", id="a real node's containerd: the root's k8s.io directory"),
    ],
)
def test_reaper_removes_containers_and_namespaces_of_a_dead_owner(tmp_path: Path, layout: str) -> None:
    make_runtime = (
        "Runc.for_run(run)"
        if layout == "emulator"
        else 'Runc(root=run.path / "containerd" / "runc" / "k8s.io", binary=choose_runc().binary)'
    )
    owner = textwrap.dedent(
        f"""
        from pathlib import Path
        import threading
        from harness.procs import open_run_dir
        from harness.runtime.netns import create_netns, netns_name
        from harness.runtime.oci import render_container_spec
        from harness.runtime.rootfs import clone_rootfs, ensure_rootfs
        from harness.runtime.runc import Runc, choose_runc
        run = open_run_dir(purpose="crash", base=Path({str(tmp_path)!r}))
        ns = create_netns(netns_name(run_id=run.run_id, suffix="pod"))
        rootfs = clone_rootfs(template=ensure_rootfs(cache_root=run.path / "cache"), destination=run.path / "c")
        spec = render_container_spec(args=["sleep", "600"], env={{}}, rootfs=rootfs, hostname="x", netns_path=ns)
        runtime = {make_runtime}
        runtime.run(container_id=run.run_id + "-c", bundle=run.path / "b", spec=spec, run=run)
        from harness.procs import wait_for
        wait_for(lambda: (runtime.state(run.run_id + "-c") or {{}}).get("status") == "running", timeout=30, what="up")
        print(run.run_id, runtime.state(run.run_id + "-c")["pid"], flush=True)
        threading.Event().wait()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id, container_pid = proc.stdout.readline().split()
    proc.stdout.close()
    assert list_run_netns(run_id) == [f"fakedev-{run_id}-pod"]
    assert Path(f"/proc/{container_pid}").exists()
    proc.kill()
    proc.wait()

    assert reap_all(base=tmp_path) == [run_id]
    assert list_run_netns(run_id) == []
    assert not Path(f"/proc/{container_pid}").exists() or "Z" in Path(f"/proc/{container_pid}/stat").read_text()
    assert list(tmp_path.glob("fakedev-*")) == []
