"""The committed wrapper go.mod equals what the generator makes from the real k8s.io/kubernetes go.mod."""

from __future__ import annotations

from harness.cluster.build import KUBERNETES_VERSION, module_dir
from harness.cluster.gomod import (
    compute_staging_modules,
    compute_staging_version,
    download_upstream_gomod,
    parse_replaces,
)


def test_committed_replaces_match_upstream_staging_list() -> None:
    upstream = download_upstream_gomod(kubernetes_version=KUBERNETES_VERSION)
    committed = (module_dir("kubernetes") / "go.mod").read_text()
    version = compute_staging_version(kubernetes_version=KUBERNETES_VERSION)
    assert parse_replaces(committed) == dict.fromkeys(compute_staging_modules(upstream_gomod=upstream), version)
    assert f"require k8s.io/kubernetes {KUBERNETES_VERSION}" in committed
