"""The fakedev OCI image as the tools that consume it see it: skopeo and umoci read its metadata, and ctr
(containerd 2.4), podman 4.3 and docker 20.10 load the one archive and run fakedev from it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from fakedev import __version__
from harness.cluster.build import default_cache_root
from harness.image.assemble import BuiltImage, build_image
from harness.image.recipe import ENTRYPOINT, image_reference
from tests.image.conftest import PROJECT_ROOT, Engine, run_tool

pytestmark = [pytest.mark.privileged, pytest.mark.xdist_group(name="image")]

REFERENCE = image_reference(version=__version__)
"""``fakedev.local/fakedev:<version>``: what every loader must name the image."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_assemblies_from_the_same_inputs_are_byte_identical(built_image: BuiltImage, tmp_path: Path) -> None:
    again = build_image(
        project_root=PROJECT_ROOT,
        version=__version__,
        out_dir=tmp_path,
        cache_root=default_cache_root(),
        progress=lambda message: print(f"[image] {message}", flush=True),
        force=True,
    )
    assert not again.from_cache
    assert again.manifest_digest == built_image.manifest_digest
    assert _sha256(again.archive) == _sha256(built_image.archive)


def test_skopeo_reads_the_annotations_and_the_config(built_image: BuiltImage) -> None:
    archive = f"oci-archive:{built_image.archive}:{REFERENCE}"
    manifest = json.loads(run_tool(["skopeo", "inspect", "--raw", archive]))
    config = json.loads(run_tool(["skopeo", "inspect", "--config", archive]))
    revision = run_tool(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"]).strip()
    annotations = manifest["annotations"]
    assert annotations["org.opencontainers.image.version"] == __version__
    assert annotations["org.opencontainers.image.revision"].removesuffix("-dirty") == revision
    assert annotations["org.opencontainers.image.source"]
    created = annotations["org.opencontainers.image.created"]
    assert config["created"] == created
    assert config["config"]["Entrypoint"] == [ENTRYPOINT]
    assert config["config"]["Labels"] == annotations
    assert config["architecture"] == "amd64"


def test_umoci_lists_the_reference_as_the_layouts_tag(built_image: BuiltImage, tmp_path: Path) -> None:
    run_tool(["tar", "--extract", f"--file={built_image.archive}", f"--directory={tmp_path}"])
    assert run_tool(["umoci", "ls", f"--layout={tmp_path}"]).split() == [REFERENCE]
    stat = json.loads(run_tool(["umoci", "stat", "--json", f"--image={tmp_path}:{REFERENCE}"]))
    assert [entry["created_by"] for entry in stat["history"]] == [
        "mmdebstrap (Debian 12)",
        "pip install (dependencies, deploy/image/requirements.lock)",
        "pip install fakedev",
    ]


def test_ctr_imports_it_and_runs_fakedev_with_runc(built_image: BuiltImage, containerd: Engine) -> None:
    imported = containerd.run("images", "import", str(built_image.archive))
    assert REFERENCE in imported
    listing = containerd.run("images", "list")
    assert built_image.manifest_digest in next(line for line in listing.splitlines() if line.startswith(REFERENCE))
    version = containerd.run("run", "--rm", REFERENCE, "fakedev-version", ENTRYPOINT, "--version")
    assert version.strip() == f"fakedev {__version__}"
    # No arguments: the image's own entrypoint and command (--help), which imports every command module.
    usage = containerd.run("run", "--rm", REFERENCE, "fakedev-help")
    assert "usage: fakedev" in usage
    assert "plugin" in usage


def test_podman_loads_it_and_runs_the_plugins_help(built_image: BuiltImage, podman: Engine) -> None:
    loaded = podman.run("load", f"--input={built_image.archive}")
    assert f"Loaded image: {REFERENCE}" in loaded
    # Explicit capabilities instead of --privileged; explicit limits, as this host's root cannot raise its own.
    help_text = podman.run(
        "run", "--rm", "--network=none", "--cap-drop=all", "--cap-add=NET_ADMIN",
        "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024", REFERENCE, "plugin", "--help",
    )  # fmt: skip
    assert "--profile" in help_text
    assert "--node-name" in help_text


def test_docker_loads_it_from_the_manifest_json_and_runs_fakedev(built_image: BuiltImage, dockerd: Engine) -> None:
    loaded = dockerd.run("load", f"--input={built_image.archive}")
    assert f"Loaded image: {REFERENCE}" in loaded
    version = dockerd.run(
        "run", "--rm", "--network=none", "--cap-drop=ALL", "--cap-add=NET_ADMIN", REFERENCE, "--version"
    )
    assert version.strip() == f"fakedev {__version__}"
    tools = dockerd.run(
        "run", "--rm", "--network=none", "--cap-drop=ALL", "--cap-add=NET_ADMIN", "--entrypoint=ip", REFERENCE,
        "-brief", "link", "show", "lo",
    )  # fmt: skip
    assert tools.split()[0] == "lo"


@pytest.mark.parametrize("tool", ["mmdebstrap", "umoci", "skopeo", "podman", "dockerd"], ids=str)
def test_the_build_and_test_tools_are_installed(tool: str) -> None:
    """scripts/install-system-deps.sh installs them; a missing one is a failure here, not a skip."""
    assert shutil.which(tool), f"{tool} is missing: run `make deps`"
