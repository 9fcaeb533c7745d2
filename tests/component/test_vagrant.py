"""The Vagrant VM's files, checked with what runs here (no VM does): Debian's ``vagrant validate`` on the Vagrantfile,
and ``vagrant/provision.sh --quick`` on a fresh Debian 12 root filesystem in a container of the private dockerd.

The container is made from mmdebstrap's ``apt`` variant (the Essential set and apt, nothing else: less than any
Vagrant box has) through the image builder's Debian layer machinery, so the script must install all it relies on.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import docker
import pytest
from docker.models.containers import Container

from harness.cluster.build import default_cache_root
from harness.docker import DockerDaemon
from harness.image.assemble import ensure_rootfs
from harness.image.recipe import DebianRootfs

PROJECT_ROOT: Final = Path(__file__).resolve().parents[2]
VAGRANT_DIR: Final = PROJECT_ROOT / "vagrant"
BARE_DEBIAN: Final = DebianRootfs(variant="apt", packages=())
CHECK_CACHE: Final = default_cache_root() / "vagrant-check"
"""The bare rootfs, and the downloads a re-run need not repeat (the Go toolchain zip, apt's archives)."""
HOST_EXTRA_CAS: Final = Path("/usr/local/share/ca-certificates")
"""The host's own additions to its trust store (a TLS-intercepting egress proxy's CA, here)."""
PROVISION_TIMEOUT_SECONDS: Final = 1200
# What apt-get, dpkg and pip need as root in the container: ownership and modes of unpacked files (CHOWN, FOWNER,
# FSETID, DAC_OVERRIDE), apt's download methods run as the _apt user (SETUID, SETGID), and stopping children (KILL).
CAPABILITIES: Final = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")
VENV: Final = "/opt/fakedev/venv"


def _go_min() -> str:
    """The Go version the project requires, from the one place it is written down."""
    found = re.search(r"^go_min=([0-9.]+)$", (PROJECT_ROOT / "scripts/install-system-deps.sh").read_text(), re.M)
    assert found, "scripts/install-system-deps.sh has no go_min= line"
    return found.group(1)


def _vagrant_env(tmp_path: Path) -> dict[str, str]:
    """Vagrant reading vagrant/Vagrantfile, with its home and machine state in ``tmp_path`` (nothing lands in the
    checkout or in ~/.vagrant.d) and no version check over the network."""
    return {
        **os.environ,
        "VAGRANT_CWD": str(VAGRANT_DIR),
        "VAGRANT_HOME": str(tmp_path / "vagrant.d"),
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot-vagrant"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
    }


@pytest.mark.parametrize(
    ("provider", "flags"),
    [
        # Everything but the provider blocks: VirtualBox, VMware and Parallels are not installed here.
        (None, ("--ignore-provider",)),
        # Debian's vagrant-libvirt plugin knows the libvirt block's settings (no libvirtd needed to validate).
        ("libvirt", ()),
    ],
    ids=["all-but-providers", "libvirt"],
)
def test_vagrant_validate_accepts_the_vagrantfile(provider: str | None, flags: tuple[str, ...], tmp_path: Path) -> None:
    vagrant = shutil.which("vagrant")
    assert vagrant, "vagrant is not installed: `make deps` installs Debian's vagrant package"
    env = _vagrant_env(tmp_path) | ({"VAGRANT_DEFAULT_PROVIDER": provider} if provider else {})
    done = subprocess.run(
        [vagrant, "validate", *flags], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"vagrant validate exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert "Vagrantfile validated successfully" in done.stdout


@pytest.mark.parametrize("script", ["provision.sh", "guest/fakedev-vm"], ids=["provision", "fakedev-vm"])
def test_the_vm_scripts_parse(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(VAGRANT_DIR / script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_provision_pins_the_go_toolchain_the_project_requires_for_both_architectures() -> None:
    text = (VAGRANT_DIR / "provision.sh").read_text()
    for arch in ("amd64", "arm64"):
        assert re.search(rf'^  "{re.escape(_go_min())} {arch} [0-9a-f]{{64}}"$', text, re.M), (_go_min(), arch)


# -- the provisioning check ----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Provisioned:
    """One ``provision.sh --quick`` run: its exit status, what it printed, and the container to read files from."""

    status: int
    output: str
    container: Container

    def read(self, path: str) -> tarfile.TarInfo:
        stream, _ = self.container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.getmembers()[0]

    def text(self, path: str) -> str:
        stream, _ = self.container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None, path
            return member.read().decode()


def _checkout_tar() -> bytes:
    """The working tree as git sees it (tracked and new files, not ignored ones) under ``vagrant/``, owned by root:
    what Vagrant's rsync puts at /vagrant, without the host's .venv or build output."""
    names = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in sorted({n.decode() for n in names if n}):
            path = PROJECT_ROOT / name
            if not path.is_file() or path.is_symlink():
                continue
            info = tar.gettarinfo(str(path), arcname=f"vagrant/{name}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with path.open("rb") as stream:
                tar.addfile(info, stream)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def provisioned(docker_daemon: DockerDaemon) -> Iterator[Provisioned]:
    rootfs = ensure_rootfs(
        cache=CHECK_CACHE, progress=lambda message: print(f"[rootfs] {message}", flush=True), rootfs=BARE_DEBIAN
    )
    caches = {name: CHECK_CACHE / name for name in ("downloads", "apt-archives")}
    for directory in caches.values():
        directory.mkdir(parents=True, exist_ok=True)
    volumes = {
        str(caches["downloads"]): {"bind": "/var/cache/fakedev-provision", "mode": "rw"},
        str(caches["apt-archives"]): {"bind": "/var/cache/apt/archives", "mode": "rw"},
    }
    if HOST_EXTRA_CAS.is_dir():
        # The container talks to the Internet as the host does (host network, below), so it trusts what the host
        # trusts: the ca-certificates package the script installs adds these CAs to the container's bundle.
        volumes[str(HOST_EXTRA_CAS)] = {"bind": str(HOST_EXTRA_CAS), "mode": "ro"}
    client = docker.DockerClient(base_url=docker_daemon.host)
    image = f"fakedev-bare-debian:{rootfs.key[:12]}"
    client.api.import_image_from_file(str(rootfs.tar), repository=image.split(":")[0], tag=image.split(":")[1])
    container = client.containers.create(
        image,
        ["/bin/bash", "/vagrant/vagrant/provision.sh", "--quick"],
        name=f"fakedev-{docker_daemon.run.run_id}-provision",
        environment={"FAKEDEV_REPO": "/vagrant"},
        # Host networking: the private daemon's bridge has no NAT (--ip-masq=false, no iptables rules), so a
        # container on it reaches nothing beyond the host. The script's traffic goes to the host's own Debian mirror
        # (the rootfs's sources are the host's), the Go module proxy and PyPI, as `make deps venv` does here.
        network_mode="host",
        cap_drop=["ALL"],
        cap_add=list(CAPABILITIES),
        volumes=volumes,
    )
    try:
        assert container.put_archive("/", _checkout_tar())
        container.start()
        status = int(container.wait(timeout=PROVISION_TIMEOUT_SECONDS)["StatusCode"])
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        print(output[-6000:])
        yield Provisioned(status=status, output=output, container=container)
    finally:
        container.remove(force=True)
        client.images.remove(image)
        client.close()


@pytest.mark.docker
@pytest.mark.xdist_group("docker")
def test_quick_provisioning_succeeds_on_bare_debian(provisioned: Provisioned) -> None:
    assert provisioned.status == 0, provisioned.output[-4000:]
    assert "provision: quick: done" in provisioned.output


@pytest.mark.docker
@pytest.mark.xdist_group("docker")
def test_provisioning_installs_the_packages_with_apt(provisioned: Provisioned) -> None:
    assert "provision: apt-get install git make python3 python3-venv curl ca-certificates unzip socat" in (
        provisioned.output
    )
    status = provisioned.text("/var/lib/dpkg/status")
    installed = set(re.findall(r"^Package: (\S+)\nStatus: install ok installed$", status, re.M))
    assert {"git", "make", "python3-venv", "curl", "unzip", "socat"} <= installed


@pytest.mark.docker
@pytest.mark.xdist_group("docker")
def test_provisioning_installs_the_go_the_project_requires(provisioned: Provisioned) -> None:
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    assert f"provision: go: go version go{_go_min()} linux/{arch} in /usr/local/lib/go{_go_min()}" in (
        provisioned.output
    )
    link = provisioned.read("/usr/local/bin/go")
    assert link.issym() and link.linkname == f"/usr/local/lib/go{_go_min()}/bin/go"


@pytest.mark.docker
@pytest.mark.xdist_group("docker")
def test_provisioning_makes_the_venv_through_the_makefile_and_the_cli_runs(provisioned: Provisioned) -> None:
    assert f"python3 -m venv {VENV}" in provisioned.output  # the Makefile's venv recipe, echoed by make
    assert "usage: fakedev" in provisioned.output
    assert "provision: fakedev --help: exit 0" in provisioned.output
    assert provisioned.read(f"{VENV}/bin/fakedev").isfile()
    assert provisioned.read(f"{VENV}/bin/kubectl").isfile()
    profile = provisioned.text("/etc/profile.d/fakedev.sh")
    assert f"export VENV={VENV}\n" in profile
