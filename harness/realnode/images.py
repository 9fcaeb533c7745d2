"""Container images for the real node, made locally (there is no registry here): OCI image-layout tarballs that
``ctr images import`` reads, one gzip layer each, reproducible (fixed mtimes, sorted entries) and cached by content.

- the sandbox ("pause") image: the static ``pause`` program built with the node binaries;
- ``busybox``: the Debian busybox-static rootfs the node emulator runs containers from;
- the local images (:data:`harness.runtime.images.LOCAL_IMAGES`, e.g. the virt-launcher stand-in): the same tree the
  emulator runs them from, under the name pods use.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.errors import ComponentError
from harness.runtime.images import LOCAL_IMAGES, ensure_image
from harness.runtime.rootfs import ensure_rootfs

PAUSE_IMAGE: Final = "fakedev.local/pause:v1"
BUSYBOX_IMAGE: Final = "fakedev.local/busybox:latest"
_MTIME: Final = 1_700_000_000
_PATH_ENV: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, kw_only=True)
class ImageTarball:
    name: str
    path: Path


def _layer(root: Path) -> bytes:
    """An uncompressed tar of ``root``'s tree: owner root, fixed mtime, entries in sorted order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath) / name
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = _MTIME
                if info.isfile():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
    tar.addfile(info, io.BytesIO(data))


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _add(tar, "blobs/sha256/" + digest.removeprefix("sha256:"), data)
    return {"digest": digest, "size": len(data)}


def write_image(*, name: str, root: Path, command: list[str], destination: Path) -> Path:
    """Write ``root`` as a one-layer OCI image called ``name`` (with its ``command``) to ``destination``."""
    raw = _layer(root)
    layer = gzip.compress(raw, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": command, "Env": [_PATH_ENV], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
    }
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        layer_ref = _blob(tar, layer)
        config_ref = _blob(tar, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_ref},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer_ref}],
        }
        manifest_ref = _blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **manifest_ref,
                    "platform": {"architecture": "amd64", "os": "linux"},
                    # containerd names the imported image after this annotation.
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rpartition(":")[2],
                    },
                }
            ],
        }
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
    partial.replace(destination)
    return destination


def _digest_tree(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_symlink():
            h.update(str(path.readlink()).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def ensure_images(*, pause_binary: Path, cache_root: Path) -> tuple[ImageTarball, ImageTarball]:
    """The pause and busybox image tarballs, written once per content (their file names carry the digest)."""
    images = cache_root / "realnode-images"
    pause_root = images / "pause-root"
    pause_root.mkdir(parents=True, exist_ok=True)
    target = pause_root / "pause"
    if not target.exists() or target.read_bytes() != pause_binary.read_bytes():
        target.write_bytes(pause_binary.read_bytes())
        target.chmod(0o755)
    out = []
    for name, root, command in (
        (PAUSE_IMAGE, pause_root, ["/pause"]),
        (BUSYBOX_IMAGE, ensure_rootfs(cache_root=cache_root), ["sh"]),
    ):
        path = images / f"{name.replace('/', '_').replace(':', '_')}-{_digest_tree(root)}.tar"
        if not path.exists():
            write_image(name=name, root=root, command=command, destination=path)
        out.append(ImageTarball(name=name, path=path))
    return out[0], out[1]


def ensure_local_image(image: str, *, cache_root: Path) -> ImageTarball:
    """The image tarball of a local image (busybox plus the image's program, built from this repository), named
    ``image`` so that importing it into a node's containerd and registry serves the name the pod spec writes. Its
    command is the program; cached by the tree's content, like the emulator's tree it is made from."""
    program = LOCAL_IMAGES.get(image)
    if program is None:
        raise ComponentError(f"{image} is not a local image (local images: {', '.join(LOCAL_IMAGES)})")
    tree = ensure_image(image, cache_root=cache_root)
    path = cache_root / "realnode-images" / f"{image.replace('/', '_').replace(':', '_')}-{tree.name}.tar"
    if not path.exists():
        write_image(name=image, root=tree, command=[f"/{program.path_in_image}"], destination=path)
    return ImageTarball(name=image, path=path)
