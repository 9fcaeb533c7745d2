"""kubeclient's own kubeconfig reader: paths, embedded data, tokens, contexts; exec users go to the official one."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest
import yaml

from harness.procs import RUN_PREFIX
from kubeclient import credentials_from_kubeconfig
from kubeclient.errors import ApiError, OfficialLoaderNeededError
from kubeclient.kubeconfig import read_kubeconfig


def _write(tmp_path: Path, doc: dict[str, object]) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def _config(*, user: dict[str, object], cluster: dict[str, object] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "a",
        "contexts": [
            {"name": "a", "context": {"cluster": "c", "user": "u"}},
            {"name": "b", "context": {"cluster": "c2", "user": "u"}},
        ],
        "clusters": [
            {
                "name": "c",
                "cluster": cluster or {"server": "https://127.0.0.1:6443", "certificate-authority": "pki/ca.crt"},
            },
            {"name": "c2", "cluster": {"server": "https://127.0.0.2:6443", "insecure-skip-tls-verify": True}},
        ],
        "users": [{"name": "u", "user": user}],
    }


def test_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    path = _write(tmp_path, _config(user={"client-certificate": "pki/admin.crt", "client-key": "/abs/admin.key"}))
    got = read_kubeconfig(path)
    assert got["server"] == "https://127.0.0.1:6443"
    assert got["ca_file"] == tmp_path.resolve() / "pki/ca.crt"
    assert got["cert_file"] == tmp_path.resolve() / "pki/admin.crt"
    assert got["key_file"] == Path("/abs/admin.key")
    assert got["token"] is None and got["insecure"] is False


def test_embedded_data_is_written_to_private_files(tmp_path: Path) -> None:
    ca, cert = b"-----CA-----\n", b"-----CERT-----\n"
    path = _write(
        tmp_path,
        _config(
            user={"client-certificate-data": base64.b64encode(cert).decode(), "client-key-data": "a2V5Cg=="},
            cluster={"server": "https://127.0.0.1:1", "certificate-authority-data": base64.b64encode(ca).decode()},
        ),
    )
    got = read_kubeconfig(path)
    assert got["ca_file"].read_bytes() == ca and got["cert_file"].read_bytes() == cert
    assert got["key_file"].read_bytes() == b"key\n" and got["key_file"].stat().st_mode & 0o077 == 0


def test_token_file_and_other_context(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("s3cret\n")
    path = _write(tmp_path, _config(user={"tokenFile": "tok"}))
    got = read_kubeconfig(path, context="b")
    assert (got["server"], got["token"], got["insecure"]) == ("https://127.0.0.2:6443", "s3cret", True)
    assert credentials_from_kubeconfig(path, context="b").token == "s3cret"


def test_problems_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ApiError, match="no context named 'nope'"):
        read_kubeconfig(_write(tmp_path, _config(user={})), context="nope")
    with pytest.raises(ApiError, match="not base64"):
        read_kubeconfig(_write(tmp_path, _config(user={"client-key-data": "!!"})))
    with pytest.raises(ApiError, match="cannot load kubeconfig"):
        read_kubeconfig(tmp_path / "missing")


def test_exec_users_are_left_to_the_official_loader(tmp_path: Path) -> None:
    path = _write(
        tmp_path, _config(user={"exec": {"command": "true", "apiVersion": "client.authentication.k8s.io/v1"}})
    )
    with pytest.raises(OfficialLoaderNeededError):
        read_kubeconfig(path)


def test_embedded_data_survives_its_directory_being_reaped(tmp_path: Path) -> None:
    """The data directory is not a run directory the reaper may take, and one removed anyway is made again."""
    config = _config(
        user={"token": "t"},
        cluster={"server": "https://127.0.0.1:1", "certificate-authority-data": base64.b64encode(b"CA").decode()},
    )
    first = read_kubeconfig(_write(tmp_path, config))
    assert not Path(first["ca_file"]).parent.name.startswith(RUN_PREFIX)
    shutil.rmtree(Path(first["ca_file"]).parent)
    again = read_kubeconfig(_write(tmp_path, config))
    assert Path(again["ca_file"]).read_bytes() == b"CA"
