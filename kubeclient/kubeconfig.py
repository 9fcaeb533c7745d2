"""Reading a kubeconfig without the official client library for the common cases.

Certificates, keys, CA bundles (as paths or embedded ``*-data``), tokens and ``insecure-skip-tls-verify`` are read
here; a user with an ``exec`` plugin or an ``auth-provider`` is left to the official loader (the caller falls back).
Importing the official client costs a long-running plugin about 30 MB of memory, which is why this exists.
"""

from __future__ import annotations

import atexit
import base64
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from kubeclient.errors import ApiError, OfficialLoaderNeededError

_DATA_DIR: Path | None = None


def _data_dir() -> Path:
    """A private directory for embedded certificates and keys (urllib3 wants files); removed at exit. Its name
    must not start with ``fakedev-``: the reaper removes unlocked ``/tmp/fakedev-*`` directories as dead runs' (it
    did, under a test that reaped while this process was alive), and one gone anyway is made again."""
    global _DATA_DIR
    if _DATA_DIR is None or not _DATA_DIR.is_dir():
        _DATA_DIR = Path(tempfile.mkdtemp(prefix="kubeclient-kubeconfig-"))
        atexit.register(shutil.rmtree, _DATA_DIR, ignore_errors=True)
    return _DATA_DIR


def _named(items: Any, name: str, *, kind: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            if isinstance(body, dict):
                return body
    raise ApiError(f"cannot load kubeconfig {path}: no {kind} named {name!r}", status=0)


def _file(section: dict[str, Any], key: str, *, base: Path, path: Path) -> Path | None:
    """``<key>`` (a path, relative to the kubeconfig's directory) or ``<key>-data`` (base64, written to a file)."""
    if data := section.get(f"{key}-data"):
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError as exc:
            raise ApiError(f"cannot load kubeconfig {path}: {key}-data is not base64: {exc}", status=0) from exc
        target = _data_dir() / f"{key}-{len(list(_data_dir().iterdir()))}"
        target.write_bytes(raw)
        target.chmod(0o600)
        return target
    if value := section.get(key):
        candidate = Path(value)
        return candidate if candidate.is_absolute() else base / candidate
    return None


def read_kubeconfig(path: Path, *, context: str | None = None) -> dict[str, Any]:
    """The fields :class:`kubeclient.client.Credentials` takes, from ``path``'s (current or given) context."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ApiError(f"cannot load kubeconfig {path}: {exc}", status=0) from exc
    if not isinstance(doc, dict):
        raise ApiError(f"cannot load kubeconfig {path}: not a mapping", status=0)
    name = context or doc.get("current-context")
    if not name:
        raise ApiError(f"cannot load kubeconfig {path}: no current-context and no context given", status=0)
    ctx = _named(doc.get("contexts"), name, kind="context", path=path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster")), kind="cluster", path=path)
    user = _named(doc.get("users"), str(ctx.get("user")), kind="user", path=path) if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise OfficialLoaderNeededError(name)
    if not cluster.get("server"):
        raise ApiError(f"cannot load kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server", status=0)
    base = path.resolve().parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text(encoding="utf-8").strip()
    return {
        "server": str(cluster["server"]),
        "ca_file": _file(cluster, "certificate-authority", base=base, path=path),
        "cert_file": _file(user, "client-certificate", base=base, path=path),
        "key_file": _file(user, "client-key", base=base, path=path),
        "token": token or None,
        "insecure": bool(cluster.get("insecure-skip-tls-verify", False)),
    }
