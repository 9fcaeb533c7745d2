"""The Kubernetes wrapper module is generated from upstream's go.mod, never typed by hand."""

from __future__ import annotations

import pytest

from harness.cluster.gomod import (
    compute_staging_modules,
    compute_staging_version,
    parse_replaces,
    render_wrapper_gomod,
)
from harness.errors import BuildError

UPSTREAM = """module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tgithub.com/spf13/cobra v1.10.2
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kubelet => ./staging/src/k8s.io/kubelet
)
"""


def test_staging_modules_come_from_the_replace_directives() -> None:
    assert compute_staging_modules(upstream_gomod=UPSTREAM) == ("k8s.io/api", "k8s.io/client-go", "k8s.io/kubelet")


@pytest.mark.parametrize(("release", "staging"), [("v1.37.2", "v0.37.2"), ("v1.36.10", "v0.36.10")], ids=str)
def test_staging_version_maps_minor_and_patch(release: str, staging: str) -> None:
    assert compute_staging_version(kubernetes_version=release) == staging


def test_rendered_wrapper_replaces_each_staging_module_with_its_release() -> None:
    text = render_wrapper_gomod(upstream_gomod=UPSTREAM, kubernetes_version="v1.37.2", go_version="1.26.0")
    assert "require k8s.io/kubernetes v1.37.2" in text
    assert parse_replaces(text) == {
        "k8s.io/api": "v0.37.2",
        "k8s.io/client-go": "v0.37.2",
        "k8s.io/kubelet": "v0.37.2",
    }


def test_a_go_mod_without_staging_replaces_is_refused() -> None:
    with pytest.raises(BuildError, match=r"no \./staging replace directives"):
        compute_staging_modules(upstream_gomod="module example.com/x\n")
