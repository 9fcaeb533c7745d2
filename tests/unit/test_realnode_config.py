"""The real node's containerd and kubelet configs keep every path private; its images are valid OCI layouts."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from harness.realnode.config import NodeLayout, render_containerd_config, render_kubelet_config
from harness.realnode.images import write_image


def _layout(tmp_path: Path) -> NodeLayout:
    return NodeLayout(root=tmp_path / "node", shim_sockets=Path("/tmp/fd-shim-abc"))


def test_containerd_config_moves_every_host_default(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    text = render_containerd_config(layout=layout, sandbox_image="fakedev.local/pause:v1", cdi_dirs=[layout.cdi_dir])
    config = tomllib.loads(text)
    assert "/run/containerd" not in text and "/var/" not in text and "/etc/" not in text and "/opt/" not in text
    plugins = config["plugins"]
    assert plugins["io.containerd.shim.v1.manager"]["socket_dir"] == "/tmp/fd-shim-abc"
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == [str(layout.cdi_dir)]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": str(layout.runc_wrapper), "Root": str(layout.runc_root), "SystemdCgroup": False}
    # Pod namespaces pinned in the node's state dir; one CNI network from the node's own dirs.
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["cni"] == {"bin_dirs": [str(layout.cni_bin)], "conf_dir": str(layout.cni_conf), "max_conf_num": 1}
    # Every pull goes to the node's registry through the hosts directory.
    assert plugins["io.containerd.cri.v1.images"]["registry"]["config_path"] == str(layout.registry_hosts)
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "fakedev.local/pause:v1"
    assert config["grpc"]["address"] == str(layout.containerd_socket)


def test_a_long_shim_socket_dir_is_refused(tmp_path: Path) -> None:
    layout = NodeLayout(root=tmp_path, shim_sockets=Path("/tmp/" + "x" * 60))
    with pytest.raises(ValueError, match="longer than 42"):
        render_containerd_config(layout=layout, sandbox_image="p", cdi_dirs=[])


def test_kubelet_config_for_a_cgroup_v1_loopback_node(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    config = yaml.safe_load(render_kubelet_config(layout=layout, address="127.0.0.3", ca_file=tmp_path / "ca.crt"))
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["address"] == config["healthzBindAddress"] == "127.0.0.3"
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert config["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    for key in ("tlsCertFile", "tlsPrivateKeyFile", "volumePluginDir", "podLogsDir"):
        assert config[key].startswith(str(layout.root)), key


def test_image_tarball_is_an_oci_layout_whose_digests_match(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hello").write_text("#!/bin/sh\necho hi\n")
    (root / "bin" / "hi").symlink_to("hello")
    out = write_image(name="fakedev.local/t:1", root=root, command=["/bin/hello"], destination=tmp_path / "t.tar")
    with tarfile.open(out) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            data = member.read()
            assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
            return data

        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index = json.loads(index_file.read())
        entry = index["manifests"][0]
        assert entry["annotations"]["io.containerd.image.name"] == "fakedev.local/t:1"
        manifest = json.loads(blob(entry["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layer = gzip.decompress(blob(manifest["layers"][0]["digest"]))
        assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
        assert config["config"]["Cmd"] == ["/bin/hello"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        names = {m.name: m for m in files.getmembers()}
        assert names["bin/hi"].issym() and names["bin/hi"].linkname == "hello"
        assert names["bin/hello"].uid == 0
    again = write_image(name="fakedev.local/t:1", root=root, command=["/bin/hello"], destination=tmp_path / "u.tar")
    assert again.read_bytes() == out.read_bytes()  # reproducible
