"""The node registry's name table and containerd hosts configuration (pure)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from harness.realnode.config import NodeLayout, render_containerd_config
from harness.realnode.registry.hosts import DEFAULT_HOSTS_FILE, render_registry_config, render_registry_hosts
from harness.realnode.registry.names import (
    ImageRule,
    denial_message,
    find_rule,
    node_rules,
    parse_image_name,
    requested_name,
)

BUSYBOX = Path("/images/busybox.tar")
PAUSE = Path("/images/pause.tar")
SPECIAL = Path("/images/special.tar")
BUSYBOX_DIGEST = "sha256:" + "b" * 64
MANIFESTS = {BUSYBOX: frozenset({BUSYBOX_DIGEST}), PAUSE: frozenset({"sha256:" + "p" * 64})}
RULES = node_rules(busybox=BUSYBOX, pause=PAUSE)


@pytest.mark.parametrize(
    ("written", "qualified"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("busybox:latest", "docker.io/library/busybox:latest"),
        ("docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("docker.io/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("index.docker.io/library/busybox", "docker.io/library/busybox:latest"),
        ("example/tool:2", "docker.io/example/tool:2"),
        ("fakedev.local/pause:v1", "fakedev.local/pause:v1"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("localhost:5000/a/b:c", "localhost:5000/a/b:c"),
    ],
    ids=lambda v: v,
)
def test_names_normalize_as_cri_does(written: str, qualified: str) -> None:
    assert str(parse_image_name(written)) == qualified


@pytest.mark.parametrize(
    ("written", "rule"),
    [
        ("Busybox:1", "repository component 'Busybox'"),
        ("busybox@sha256:" + "a" * 64, "give a tag, not a digest"),
        ("busybox:*", "tag '*' is not a valid tag"),
        ("busybox:-x", "tag '-x' is not a valid tag"),
        ("a..b/c:1", "not a registry host"),
    ],
    ids=["uppercase", "digest", "any-tag-not-allowed", "bad-tag", "bad-host"],
)
def test_bad_names_are_refused_naming_the_rule(written: str, rule: str) -> None:
    with pytest.raises(ValueError, match="image name") as caught:
        parse_image_name(written)
    assert rule in str(caught.value)


@pytest.mark.parametrize(
    ("name", "familiar"),
    [
        ("docker.io/library/busybox:*", "busybox:<any tag>"),
        ("docker.io/example/tool:2", "example/tool:2"),
        ("fakedev.local/pause:v1", "fakedev.local/pause:v1"),
    ],
    ids=["library-any-tag", "docker-hub-user", "other-host"],
)
def test_familiar_names(name: str, familiar: str) -> None:
    assert parse_image_name(name, any_tag=True).familiar == familiar


@pytest.mark.parametrize(
    ("host", "repository", "reference", "archive"),
    [
        ("docker.io", "library/busybox", "1.36", BUSYBOX),
        ("docker.io", "library/busybox", "latest", BUSYBOX),
        ("docker.io", "library/busybox", "1.37.0-musl", BUSYBOX),
        ("index.docker.io", "library/busybox", "1.36", BUSYBOX),
        ("fakedev.local", "busybox", "latest", BUSYBOX),
        ("fakedev.local", "busybox", "anything", BUSYBOX),
        ("fakedev.local", "pause", "v1", PAUSE),
        ("docker.io", "library/busybox", BUSYBOX_DIGEST, BUSYBOX),
        ("fakedev.local", "pause", "v2", None),
        ("docker.io", "library/nginx", "1.27", None),
        ("quay.io", "library/busybox", "1.36", None),
        ("docker.io", "someone/busybox", "1.36", None),
        ("registry.k8s.io", "pause", "3.10", None),
        ("docker.io", "library/busybox", "sha256:" + "0" * 64, None),
        ("fakedev.local", "pause", BUSYBOX_DIGEST, None),
    ],
    ids=[
        "busybox-tag", "busybox-latest", "busybox-any-tag", "docker-index-alias", "fakedev-busybox-latest",
        "fakedev-busybox-any-tag", "pause", "busybox-by-digest", "pause-other-tag", "unknown-repository",
        "busybox-on-other-host", "other-user-busybox", "upstream-pause", "unknown-digest", "digest-of-another-repo",
    ],
)  # fmt: skip
def test_find_rule(host: str, repository: str, reference: str, archive: Path | None) -> None:
    rule = find_rule(RULES, host=host, repository=repository, reference=reference, manifests=MANIFESTS)
    assert (rule.archive if rule is not None else None) == archive


def test_an_exact_tag_wins_over_any_tag() -> None:
    special = ImageRule(name=parse_image_name("busybox:special"), archive=SPECIAL)
    rules = (*RULES, special)
    found = find_rule(rules, host="docker.io", repository="library/busybox", reference="special", manifests=MANIFESTS)
    assert found == special
    other = find_rule(rules, host="docker.io", repository="library/busybox", reference="1.36", manifests=MANIFESTS)
    assert other is not None and other.archive == BUSYBOX


def test_denial_names_the_request_and_the_available_images() -> None:
    added = ImageRule(name=parse_image_name("quay.io/example/sleeper:2"), archive=SPECIAL)
    wanted = requested_name(host="docker.io", repository="library/nginx", reference="1.27")
    assert denial_message((*RULES, added), requested=wanted) == (
        "fakedev: docker.io/library/nginx:1.27 is not on this node; images available: busybox:<any tag>, "
        "fakedev.local/busybox:<any tag>, fakedev.local/pause:v1, quay.io/example/sleeper:2"
    )


def test_a_digest_request_is_named_with_an_at_sign() -> None:
    digest = "sha256:" + "1" * 64
    assert requested_name(host="docker.io", repository="library/x", reference=digest) == f"docker.io/library/x@{digest}"


def test_hosts_file_sends_every_host_to_the_local_server() -> None:
    files = render_registry_hosts("http://127.0.0.1:41234")
    assert list(files) == [DEFAULT_HOSTS_FILE] == ["_default/hosts.toml"]
    parsed = tomllib.loads(files[DEFAULT_HOSTS_FILE])
    assert parsed == {"server": "http://127.0.0.1:41234", "capabilities": ["pull", "resolve"]}


@pytest.mark.parametrize(
    "server",
    ["https://127.0.0.1:5000", "http://10.0.0.1:5000", "http://registry-1.docker.io", "http://127.0.0.1:5000/v2"],
    ids=["https", "off-machine", "upstream", "with-path"],
)
def test_hosts_file_refuses_anything_but_a_loopback_http_server(server: str) -> None:
    with pytest.raises(ValueError, match="expected http://127"):
        render_registry_hosts(server)


def test_registry_config_lines_extend_the_node_config(tmp_path: Path) -> None:
    layout = NodeLayout(root=tmp_path, shim_sockets=Path("/tmp/fd-shim-x"))
    config = render_containerd_config(layout=layout, sandbox_image="fakedev.local/pause:v1", cdi_dirs=())
    hosts_dir = layout.registry_hosts
    assert "\n".join(render_registry_config(hosts_dir)) in config
    parsed = tomllib.loads(config)
    images = parsed["plugins"]["io.containerd.cri.v1.images"]
    assert images["registry"] == {"config_path": str(hosts_dir)}
    assert images["pinned_images"] == {"sandbox": "fakedev.local/pause:v1"}
