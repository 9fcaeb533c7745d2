"""A real node needs the cluster's CA to sign its certificates: without it, a clear error before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from harness.errors import ClusterStateError
from harness.realnode.node import settings_for_cluster
from kubeclient import KubeClient


def test_a_missing_cluster_ca_is_named_with_the_option_that_fixes_it(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("only the certificate, no key\n")
    with pytest.raises(ClusterStateError, match=rf"no cluster CA at {tmp_path} \(ca.crt and ca.key\); give --ca DIR"):
        settings_for_cluster(client=cast(KubeClient, object()), ca_dir=tmp_path, address="127.0.0.1")
