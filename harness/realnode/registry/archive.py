"""An OCI image-layout tarball as the registry serves it.

Loading reads the tar's headers once: where each blob lies, which blobs are manifests (and their media types, from
the descriptors that point at them), which manifest ``index.json`` names as the image. Blobs are then streamed from
their place in the tar, never unpacked; that needs a plain tar, which is what ``harness/realnode/images.py`` and
``ctr images export`` write.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from harness.errors import RegistryError
from harness.realnode.registry.names import ANY_TAG, ImageName, parse_image_name

INDEX_TYPES: Final = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
MANIFEST_TYPES: Final = frozenset(
    {"application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"}
)
NAME_ANNOTATION: Final = "io.containerd.image.name"
_CHUNK: Final = 1 << 20
_MAX_MANIFEST: Final = 4 << 20
"""Manifests are read into memory (and checked); a bigger one is not a manifest."""


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    media_type: str
    digest: str
    size: int


@dataclass(frozen=True, kw_only=True)
class _Place:
    offset: int
    size: int


@dataclass(frozen=True, kw_only=True)
class OciArchive:
    path: Path
    blobs: Mapping[str, _Place]
    manifests: Mapping[str, str]
    """Digest → media type of every manifest and index reachable from ``index.json``."""
    roots: tuple[tuple[str | None, Descriptor], ...]
    """``index.json``'s entries with the name each one carries (containerd's image-name annotation), if any."""

    def root_for(self, name: ImageName) -> Descriptor:
        """The manifest served for ``name``'s tags: the entry named so, or the archive's only entry."""
        named = [d for n, d in self.roots if n is not None and _same_image(n, name)]
        if named:
            return named[0]
        if len(self.roots) == 1:
            return self.roots[0][1]
        names = ", ".join(n or "(unnamed)" for n, _d in self.roots)
        raise RegistryError(f"{self.path} holds several images ({names}) and none is called {name}")

    def size(self, digest: str) -> int | None:
        place = self.blobs.get(digest)
        return None if place is None else place.size

    def read(self, digest: str) -> bytes:
        place = self.blobs[digest]
        with self.path.open("rb") as f:
            f.seek(place.offset)
            return f.read(place.size)

    def stream(self, digest: str, *, out: Sink) -> None:
        place = self.blobs[digest]
        with self.path.open("rb") as f:
            f.seek(place.offset)
            left = place.size
            while left:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    raise RegistryError(f"{self.path} ends inside blob {digest}")
                out.write(chunk)
                left -= len(chunk)


def _same_image(annotated: str, name: ImageName) -> bool:
    try:
        parsed = parse_image_name(annotated)
    except ValueError:
        return False
    same_repository = (parsed.host, parsed.repository) == (name.host, name.repository)
    return same_repository and (name.tag == ANY_TAG or parsed.tag == name.tag)


def _descriptor(raw: object, *, where: str) -> Descriptor:
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: a descriptor must be an object")
    media_type, digest, size = raw.get("mediaType"), raw.get("digest"), raw.get("size")
    if not (isinstance(media_type, str) and isinstance(digest, str) and isinstance(size, int)):
        raise RegistryError(f"{where}: a descriptor needs mediaType, digest and size")
    return Descriptor(media_type=media_type, digest=digest, size=size)


def _entries(document: bytes, *, where: str) -> list[tuple[str | None, Descriptor]]:
    try:
        parsed = json.loads(document)
    except ValueError as exc:
        raise RegistryError(f"{where} is not JSON: {exc}") from exc
    raw = parsed.get("manifests") if isinstance(parsed, dict) else None
    if not isinstance(raw, list):
        raise RegistryError(f"{where} has no manifests list")
    out = []
    for i, item in enumerate(raw):
        descriptor = _descriptor(item, where=f"{where} manifests[{i}]")
        annotations = item.get("annotations") or {}
        name = annotations.get(NAME_ANNOTATION) if isinstance(annotations, dict) else None
        out.append((name if isinstance(name, str) else None, descriptor))
    return out


def load_archive(path: Path) -> OciArchive:
    """Index ``path``; RegistryError if it is not a plain-tar OCI layout whose manifests are all there and intact."""
    blobs: dict[str, _Place] = {}
    index: bytes | None = None
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                parts = member.name.removeprefix("./").split("/")
                if len(parts) == 3 and parts[0] == "blobs":
                    blobs[f"{parts[1]}:{parts[2]}"] = _Place(offset=member.offset_data, size=member.size)
                elif parts == ["index.json"]:
                    reader = tar.extractfile(member)
                    index = reader.read() if reader is not None else None
    except (OSError, tarfile.TarError) as exc:
        raise RegistryError(f"{path}: not a readable plain (uncompressed) tar: {exc}") from exc
    if index is None:
        raise RegistryError(f"{path} has no index.json: not an OCI image layout")
    archive = OciArchive(path=path, blobs=blobs, manifests={}, roots=tuple(_entries(index, where=f"{path}:index.json")))
    manifests: dict[str, str] = {}
    pending = [d for _n, d in archive.roots]
    while pending:
        descriptor = pending.pop()
        if descriptor.digest in manifests:
            continue
        document = _checked(archive, descriptor)
        manifests[descriptor.digest] = descriptor.media_type
        where = f"{path}: manifest {descriptor.digest}"
        if descriptor.media_type in INDEX_TYPES:
            pending.extend(d for _n, d in _entries(document, where=where))
        elif descriptor.media_type in MANIFEST_TYPES:
            _require_parts(archive, document, where=where)
    return OciArchive(path=path, blobs=blobs, manifests=manifests, roots=archive.roots)


def _checked(archive: OciArchive, descriptor: Descriptor) -> bytes:
    size = archive.size(descriptor.digest)
    if size is None:
        raise RegistryError(f"{archive.path} lacks blob {descriptor.digest}, which its index names")
    if size > _MAX_MANIFEST or size != descriptor.size:
        raise RegistryError(f"{archive.path}: blob {descriptor.digest} is {size} bytes, its descriptor says "
                            f"{descriptor.size}")  # fmt: skip
    document = archive.read(descriptor.digest)
    algorithm, _colon, expected = descriptor.digest.partition(":")
    if algorithm == "sha256" and hashlib.sha256(document).hexdigest() != expected:
        raise RegistryError(f"{archive.path}: blob {descriptor.digest} does not match its digest")
    return document


def _require_parts(archive: OciArchive, document: bytes, *, where: str) -> None:
    """Every blob an image manifest names is in the archive (a pull would stop half-way otherwise)."""
    try:
        parsed = json.loads(document)
    except ValueError as exc:
        raise RegistryError(f"{where} is not JSON: {exc}") from exc
    parts = [parsed.get("config"), *(parsed.get("layers") or [])] if isinstance(parsed, dict) else []
    for part in parts:
        digest = _descriptor(part, where=where).digest
        if digest not in archive.blobs:
            raise RegistryError(f"{where} names blob {digest}, which {archive.path} lacks")
