"""Which of the node's images a registry request names (pure).

Image names are normalized the way containerd's CRI does before it pulls (``busybox:1.36`` is
``docker.io/library/busybox:1.36``, no tag means ``latest``), and a request arrives as (registry host, repository,
tag or digest): containerd sends the host it was asked for in the ``ns`` query parameter. A table of rules maps such
triples to the archive that serves them; a rule's tag may be ``*`` (any tag), which is how ``busybox`` under every
tag a user may write is the one busybox stand-in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEFAULT_HOST: Final = "docker.io"
"""The registry of a name without a host, as Docker and containerd read it."""
ANY_TAG: Final = "*"
_HOST_ALIASES: Final = {"index.docker.io": DEFAULT_HOST, "registry-1.docker.io": DEFAULT_HOST}
_COMPONENT: Final = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_LABEL: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?")
_DIGEST: Final = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")


@dataclass(frozen=True, kw_only=True)
class ImageName:
    """A fully qualified image name: ``<host>/<repository>:<tag>`` (``tag`` is ``*`` in a rule for any tag)."""

    host: str
    repository: str
    tag: str

    def __str__(self) -> str:
        return f"{self.host}/{self.repository}:{self.tag}"

    @property
    def familiar(self) -> str:
        """The short form users write (``busybox:1.36``), ``<any tag>`` for a rule's ``*``."""
        path = f"{self.host}/{self.repository}"
        if self.host == DEFAULT_HOST:
            path = self.repository.removeprefix("library/") if self.repository.count("/") == 1 else self.repository
        return f"{path}:{'<any tag>' if self.tag == ANY_TAG else self.tag}"


def normalize_host(host: str) -> str:
    return _HOST_ALIASES.get(host.lower(), host.lower())


def is_digest(reference: str) -> bool:
    return _DIGEST.fullmatch(reference) is not None


def parse_image_name(text: str, *, any_tag: bool = False) -> ImageName:
    """``text`` as a fully qualified name; ``any_tag`` allows the tag ``*``. Raises ValueError naming the rule."""
    if "@" in text:
        raise ValueError(f"image name {text!r}: give a tag, not a digest")
    first, slash, rest = text.partition("/")
    # As in Docker: the first component is a registry host only if it looks like one.
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, remainder = normalize_host(first), rest
        if _HOST.fullmatch(first) is None:
            raise ValueError(f"image name {text!r}: {first!r} is not a registry host")
    else:
        host, remainder = DEFAULT_HOST, text
    repository, colon, tag = remainder.partition(":")
    if not colon:
        tag = "latest"
    if host == DEFAULT_HOST and "/" not in repository:
        repository = f"library/{repository}"
    for component in repository.split("/"):
        if _COMPONENT.fullmatch(component) is None:
            raise ValueError(
                f"image name {text!r}: repository component {component!r} must be lowercase letters and digits "
                "joined by '.', '_', '__' or '-'"
            )
    if not (_TAG.fullmatch(tag) or (any_tag and tag == ANY_TAG)):
        raise ValueError(f"image name {text!r}: tag {tag!r} is not a valid tag" + (" or *" if any_tag else ""))
    return ImageName(host=host, repository=repository, tag=tag)


@dataclass(frozen=True, kw_only=True)
class ImageRule:
    """Requests for ``name`` (any tag when its tag is ``*``) are served from the OCI layout ``archive``."""

    name: ImageName
    archive: Path


def node_rules(*, busybox: Path, pause: Path) -> tuple[ImageRule, ...]:
    """The real node's images: busybox under every name and tag users write, the pinned sandbox image."""

    def rule(text: str, archive: Path) -> ImageRule:
        return ImageRule(name=parse_image_name(text, any_tag=True), archive=archive)

    return (
        rule("docker.io/library/busybox:*", busybox),
        rule("fakedev.local/busybox:*", busybox),
        rule("fakedev.local/pause:v1", pause),
    )


def find_rule(
    rules: Sequence[ImageRule],
    *,
    host: str,
    repository: str,
    reference: str,
    manifests: Mapping[Path, frozenset[str]],
) -> ImageRule | None:
    """The rule serving ``reference`` (a tag or a manifest digest) of ``host/repository``, or None.

    An exact tag wins over ``*``; a digest is served by the first rule for the repository whose archive holds a
    manifest with that digest (``manifests``: archive → its manifests' digests).
    """
    host = normalize_host(host)
    candidates = [r for r in rules if r.name.host == host and r.name.repository == repository]
    if is_digest(reference):
        return next((r for r in candidates if reference in manifests.get(r.archive, frozenset())), None)
    exact = next((r for r in candidates if r.name.tag == reference), None)
    return exact or next((r for r in candidates if r.name.tag == ANY_TAG), None)


def rules_for_repository(rules: Sequence[ImageRule], *, host: str, repository: str) -> tuple[ImageRule, ...]:
    """Every rule for ``host/repository`` (a blob may come from any of their archives)."""
    host = normalize_host(host)
    return tuple(r for r in rules if r.name.host == host and r.name.repository == repository)


def requested_name(*, host: str, repository: str, reference: str) -> str:
    """The name a request asked for, as containerd spells it in its errors."""
    separator = "@" if is_digest(reference) else ":"
    return f"{normalize_host(host)}/{repository}{separator}{reference}"


def denial_message(rules: Sequence[ImageRule], *, requested: str) -> str:
    """What the pull error says for an image this node does not have: the name and the names it has."""
    available = list(dict.fromkeys(r.name.familiar for r in rules))
    return f"fakedev: {requested} is not on this node; images available: {', '.join(available) or 'none'}"
