"""Build the fakedev OCI image with Debian's tools: mmdebstrap for the root filesystem, pip inside it, umoci for the
image, GNU tar for the archive — no registry, no Dockerfile, no tar code of ours.

Layers, each cached by its inputs under ``<cache>/image/``:

1. Debian 12 (``rootfs/<key>/rootfs.tar``): mmdebstrap from the host's own package indices, keyed by the package list,
   the sources and the indices' ``InRelease`` digests; its timestamps are the indices' ``Date``.
2. the locked dependency wheels, installed by pip running inside that rootfs (so paths and shebangs are the image's);
3. fakedev's own wheel (a commit changes only this small layer);
4. the cluster flavour only (``--with-cluster``): the control plane's binaries from ``fakedev cluster build``'s
   cache, laid out as that cache under :data:`~harness.image.recipe.CLUSTER_CACHE`.

The finished archive is cached by all inputs together, so a warm build with nothing changed is a copy.
"""

from __future__ import annotations

import email.utils
import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from harness.cluster.build import DEFAULT_GROUPS, cache_entry, check_cache
from harness.errors import ImageError
from harness.image.recipe import (
    CLUSTER_CACHE,
    IMAGE_ROOTFS,
    DebianRootfs,
    Flavour,
    ImageIdentity,
    Lock,
    apt_list_prefix,
    archive_name,
    compute_config_args,
    compute_image_key,
    compute_mmdebstrap_argv,
    compute_rootfs_key,
    compute_tar_argv,
    parse_apt_sources,
    render_docker_manifest,
    render_sources_list,
    rfc3339,
)
from harness.image.wheels import LOCK_PATH, build_fakedev_wheel, download_wheels, read_lock, wheel_for

Progress = Callable[[str], None]
APT_SOURCES: Final = Path("/etc/apt")
APT_LISTS: Final = Path("/var/lib/apt/lists")
HEARTBEAT_SECONDS: Final = 10.0
KEEP_ARCHIVES: Final = 3
"""Cached archives kept (the newest): every source change makes a new one of about 60 MB."""
KEEP_ROOTFS: Final = 2
LAYOUT_TAG: Final = "image"


@dataclass(frozen=True, kw_only=True)
class BuiltImage:
    archive: Path
    reference: str
    manifest_digest: str
    archive_bytes: int
    layers_bytes: int
    """The layers uncompressed: what the image takes once unpacked."""
    seconds: float
    from_cache: bool


@dataclass(frozen=True, kw_only=True)
class RootfsEntry:
    tar: Path
    key: str
    epoch: int


# -- running tools -------------------------------------------------------------------------------------------------


def _run(argv: Sequence[str], *, what: str, env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False, env=env)
    except FileNotFoundError as exc:
        raise ImageError(f"{what}: {argv[0]} is not installed (run `make deps`)") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-20:])
        raise ImageError(f"{what} failed (exit {done.returncode}): {' '.join(argv[:3])} …\n{tail}")
    return done.stdout


def _run_with_progress(argv: Sequence[str], *, what: str, env: Mapping[str, str], progress: Progress) -> None:
    """A long step: its ``I:`` lines as progress when they come, a heartbeat when they do not."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError as exc:
        raise ImageError(f"{what}: {argv[0]} is not installed (run `make deps`)") from exc
    lines: list[str] = []
    last = [time.monotonic()]

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("I: "):
                progress(f"{what}: {line[3:].strip()}")
                last[0] = time.monotonic()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while True:
        try:
            proc.wait(timeout=HEARTBEAT_SECONDS)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() - last[0] >= HEARTBEAT_SECONDS:
                progress(f"{what}: {int(time.monotonic() - started)} s")
    reader.join()
    assert proc.stdout is not None
    proc.stdout.close()  # else the pipe is left to the garbage collector (a ResourceWarning, an error in tests)
    if proc.returncode != 0:
        tail = "\n".join(lines[-25:])
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _prune(directory: Path, *, keep: int) -> None:
    """Remove all but the ``keep`` newest cache entries of ``directory``."""
    entries = sorted((p for p in directory.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[keep:]:
        shutil.rmtree(stale, ignore_errors=True)


def _atomic_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    shutil.copyfile(source, partial)
    partial.rename(target)


# -- the Debian layer ----------------------------------------------------------------------------------------------


def host_sources() -> str:
    """The image's sources list, from the host's apt sources (the mirror this machine already uses)."""
    found = []
    for path in sorted([*APT_SOURCES.glob("sources.list"), *APT_SOURCES.glob("sources.list.d/*")]):
        if path.suffix in (".list", ".sources") or path.name == "sources.list":
            found += parse_apt_sources(text=path.read_text(), deb822=path.suffix == ".sources")
    text = render_sources_list(found)
    if not text:
        raise ImageError(f"no enabled 'deb' source for Debian bookworm (main) in {APT_SOURCES}/sources.list*")
    return text


def _index_files(sources: str) -> dict[str, list[Path]]:
    """Per suite line: the host's InRelease and main amd64 Packages files (apt-get update must have run)."""
    files: dict[str, list[Path]] = {}
    for line in sources.splitlines():
        _deb, uri, suite, *_ = line.split()
        prefix = apt_list_prefix(uri=uri, suite=suite)
        release = APT_LISTS / f"{prefix}_InRelease"
        packages = sorted(APT_LISTS.glob(f"{prefix}_main_binary-amd64_Packages*"))
        if not release.is_file() or not packages:
            raise ImageError(f"no package indices for '{line}' in {APT_LISTS}; run `apt-get update` first")
        files[line] = [release, *packages]
    return files


def _release_epoch(release: Path) -> int:
    for line in release.read_text(errors="replace").splitlines():
        if line.startswith("Date:"):
            return int(email.utils.parsedate_to_datetime(line.removeprefix("Date:").strip()).timestamp())
    raise ImageError(f"{release} has no Date field")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_rootfs(*, cache: Path, progress: Progress, rootfs: DebianRootfs = IMAGE_ROOTFS) -> RootfsEntry:
    """The Debian layer's tar (or another ``rootfs`` recipe's), from ``<cache>/rootfs/`` or made by mmdebstrap."""
    sources = host_sources()
    indices = _index_files(sources)
    version = _run(["mmdebstrap", "--version"], what="mmdebstrap --version").strip()
    digests = {
        path.name: _sha256(path) for paths in indices.values() for path in paths if path.name.endswith("Release")
    }
    key = compute_rootfs_key(sources=sources, index_digests=digests, mmdebstrap_version=version, rootfs=rootfs)
    epoch = max(_release_epoch(paths[0]) for paths in indices.values())
    entry = cache / "rootfs" / key
    tar = entry / "rootfs.tar"
    if tar.is_file():
        os.utime(entry)  # last used: pruning keeps the entries in use
        return RootfsEntry(tar=tar, key=key, epoch=epoch)
    progress(f"Debian rootfs {key[:12]} is not cached: mmdebstrap (about a minute)")
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "tmp", prefix="rootfs-") as tmp:
        work = Path(tmp)
        lists = work / "lists"
        lists.mkdir()
        for paths in indices.values():
            for path in paths:
                shutil.copy2(path, lists / path.name)
        (work / "sources.list").write_text(sources)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        argv = compute_mmdebstrap_argv(
            sources_file=work / "sources.list", lists_dir=lists, target=work / "rootfs.tar", rootfs=rootfs
        )
        _run_with_progress(argv, what="mmdebstrap", env=env, progress=progress)
        listing = _run(
            ["tar", "--extract", "--to-stdout", f"--file={work / 'rootfs.tar'}", "./var/lib/dpkg/status"],
            what="reading the rootfs's package list",
        )
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "packages.txt").write_text(_package_versions(listing))
        (entry / "sources.list").write_text(sources)
        (work / "rootfs.tar").rename(tar)
    return RootfsEntry(tar=tar, key=key, epoch=epoch)


def _package_versions(status: str) -> str:
    rows: list[str] = []
    for stanza in status.split("\n\n"):
        name = re.search(r"^Package: (\S+)", stanza, re.MULTILINE)
        version = re.search(r"^Version: (\S+)", stanza, re.MULTILINE)
        if name and version:
            rows.append(f"{name.group(1)} {version.group(1)}")
    return "".join(f"{row}\n" for row in sorted(rows))


# -- the Python layers ---------------------------------------------------------------------------------------------


def _install_in_rootfs(*, rootfs: Path, requirements: str, root: str, extra: Sequence[str]) -> None:
    """pip from its own wheel, run by the rootfs's python3 under chroot, installing into ``root`` inside it."""
    (rootfs / "wheels" / "requirements.txt").write_text(requirements)
    pip = next((rootfs / "wheels").glob("pip-*.whl"))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    _run(
        [
            "chroot", str(rootfs), "python3", f"/wheels/{pip.name}/pip", "install", "--quiet", "--no-index",
            "--find-links=/wheels", "--no-deps", "--require-hashes", "--no-compile", "--break-system-packages",
            "--disable-pip-version-check", "--no-warn-script-location", "--root-user-action=ignore", f"--root={root}",
            "--requirement=/wheels/requirements.txt", *extra,
        ],
        what=f"pip install into {root}",
        env=env,
    )  # fmt: skip


def _normalize(tree: Path, *, epoch: int) -> None:
    """One mtime for everything (the layer's tar headers carry it) and no byte code."""
    for pycache in sorted(tree.rglob("__pycache__"), reverse=True):
        shutil.rmtree(pycache)
    _run(["find", str(tree), "-exec", "touch", "--no-dereference", f"--date=@{epoch}", "{}", "+"], what="touch")


# -- the image -----------------------------------------------------------------------------------------------------


def git_identity(
    *, project_root: Path, version: str, source: str | None, flavour: Flavour = Flavour.PLAIN
) -> ImageIdentity:
    def git(*args: str) -> str:
        return _run(["git", "-C", str(project_root), *args], what=f"git {args[0]}").strip()

    revision = git("rev-parse", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        revision += "-dirty"
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or git("log", "-1", "--format=%ct"))
    if source is None:
        done = subprocess.run(
            ["git", "-C", str(project_root), "remote", "get-url", "origin"], capture_output=True, text=True, check=False
        )
        source = done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "local"
    return ImageIdentity(version=version, revision=revision, source=source, epoch=epoch, flavour=flavour)


def _umoci(*args: str, what: str) -> str:
    return _run(["umoci", *args], what=f"umoci {what}")


def _assemble(
    *,
    work: Path,
    rootfs: RootfsEntry,
    deps: Path,
    app: Path,
    identity: ImageIdentity,
    archive: Path,
    cluster: Path | None,
) -> None:
    layout = work / "layout"
    image = f"{layout}:{LAYOUT_TAG}"
    # umoci names a tag with the reference itself: the index's org.opencontainers.image.ref.name is what ctr and
    # podman name the image after.
    _umoci("init", f"--layout={layout}", what="init")
    _umoci("new", f"--image={image}", what="new")
    when = f"--history.created={rfc3339(rootfs.epoch)}"
    _umoci(
        "raw", "add-layer", f"--image={image}", when, "--history.created_by=mmdebstrap (Debian 12)",
        str(rootfs.tar), what="raw add-layer",
    )  # fmt: skip
    when = f"--history.created={identity.created}"
    for tree, label in (
        (deps, "pip install (dependencies, deploy/image/requirements.lock)"),
        (app, "pip install fakedev"),
    ):
        _umoci("insert", f"--image={image}", when, f"--history.created_by={label}", str(tree), "/usr/local", what=label)
    if cluster is not None:
        label = "fakedev cluster build (kube-apiserver, kube-scheduler, kube-controller-manager, etcd)"
        _umoci(
            "insert", f"--image={image}", when, f"--history.created_by={label}", str(cluster), CLUSTER_CACHE, what=label
        )
    _umoci("config", f"--image={image}", *compute_config_args(identity=identity), what="config")
    _umoci("tag", f"--image={image}", identity.reference, what="tag")
    _umoci("rm", f"--image={image}", what="rm")
    _umoci("gc", f"--layout={layout}", what="gc")
    index = json.loads((layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"]
    manifest = json.loads((layout / "blobs" / "sha256" / manifest_digest.removeprefix("sha256:")).read_text())
    (layout / "manifest.json").write_text(
        render_docker_manifest(
            reference=identity.reference,
            config_digest=manifest["config"]["digest"],
            layer_digests=[layer["digest"] for layer in manifest["layers"]],
        )
    )
    _run(
        compute_tar_argv(
            archive=archive, directory=layout, members=["blobs", "index.json", "manifest.json", "oci-layout"],
            epoch=identity.epoch,
        ),
        what="tar of the OCI layout",
    )  # fmt: skip


def inspect_archive(archive: Path) -> tuple[str, int]:
    """The manifest digest and the uncompressed size of the layers, read back from the finished archive."""
    with tempfile.TemporaryDirectory(prefix="fakedev-image-inspect-") as tmp:
        _run(["tar", "--extract", f"--file={archive}", f"--directory={tmp}"], what="tar extract")
        layout = Path(tmp)
        digest: str = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
        manifest = json.loads((layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_text())
        total = 0
        for layer in manifest["layers"]:
            with gzip.open(layout / "blobs" / "sha256" / layer["digest"].removeprefix("sha256:")) as stream:
                while block := stream.read(1 << 20):
                    total += len(block)
        return digest, total


def build_image(
    *,
    project_root: Path,
    version: str,
    out_dir: Path,
    cache_root: Path,
    progress: Progress,
    source: str | None = None,
    force: bool = False,
    flavour: Flavour = Flavour.PLAIN,
) -> BuiltImage:
    """``build/image/fakedev-<version>.oci.tar``: an OCI layout plus a docker ``manifest.json``, tarred (the cluster
    flavour: ``fakedev-<version>-cluster.oci.tar``, its binaries from the cache under ``cache_root``).

    One build at a time per cache (two test workers, or a test and ``make image``, would otherwise build the same
    rootfs into the same directory): the others wait on the cache's lock and then find the result cached."""
    cache = cache_root / "image"
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".build.lock").open("a") as held:
        if not _try_lock(held):
            progress(f"waiting for another build of the image (lock {cache / '.build.lock'})")
            fcntl.flock(held, fcntl.LOCK_EX)
        return _build_image_locked(
            project_root=project_root,
            version=version,
            out_dir=out_dir,
            cache=cache,
            progress=progress,
            source=source,
            force=force,
            flavour=flavour,
        )


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def cluster_entries(*, cache_root: Path) -> dict[str, Path]:
    """The control plane's cache entries (``k8s/<version>`` …) the cluster flavour carries; a missing or broken
    one is an error saying to build it."""
    entries: dict[str, Path] = {}
    for group in DEFAULT_GROUPS:
        if (reason := check_cache(group=group, cache_root=cache_root)) is not None:
            raise ImageError(
                f"the cluster image needs {group.group} {group.version} ({reason}): run `fakedev cluster build`"
            )
        entries[f"{group.group}/{group.version}"] = cache_entry(group=group, cache_root=cache_root)
    return entries


def _build_image_locked(
    *,
    project_root: Path,
    version: str,
    out_dir: Path,
    cache: Path,
    progress: Progress,
    source: str | None,
    force: bool,
    flavour: Flavour,
) -> BuiltImage:
    started = time.monotonic()
    identity = git_identity(project_root=project_root, version=version, source=source, flavour=flavour)
    cluster = cluster_entries(cache_root=cache.parent) if flavour is Flavour.CLUSTER else None
    manifests = {name: _sha256(entry / "manifest.json") for name, entry in (cluster or {}).items()}
    lock = read_lock(project_root=project_root)
    wheel = build_fakedev_wheel(
        project_root=project_root, cache_dir=cache / "fakedev-wheel", epoch=identity.epoch, progress=progress
    )
    rootfs = ensure_rootfs(cache=cache, progress=progress)
    lock_text = (project_root / LOCK_PATH).read_text()
    key = compute_image_key(
        rootfs_key=rootfs.key,
        lock_text=lock_text,
        wheel_sha256=_sha256(wheel),
        identity=identity,
        cluster_manifests=manifests,
    )
    cached = cache / "images" / key / archive_name(version=version, flavour=flavour)
    archive = out_dir / archive_name(version=version, flavour=flavour)
    from_cache = cached.is_file() and not force
    if from_cache:
        os.utime(cached.parent)
    if not from_cache:
        _build_archive(
            cache=cache,
            rootfs=rootfs,
            lock=lock,
            wheel=wheel,
            identity=identity,
            target=cached,
            progress=progress,
            cluster=cluster,
        )
        _prune(cache / "images", keep=KEEP_ARCHIVES)
        _prune(cache / "rootfs", keep=KEEP_ROOTFS)
    _atomic_copy(cached, archive)
    digest, layers_bytes = inspect_archive(archive)
    return BuiltImage(
        archive=archive,
        reference=identity.reference,
        manifest_digest=digest,
        archive_bytes=archive.stat().st_size,
        layers_bytes=layers_bytes,
        seconds=time.monotonic() - started,
        from_cache=from_cache,
    )


def _build_archive(
    *, cache: Path, rootfs: RootfsEntry, lock: Lock, wheel: Path, identity: ImageIdentity, target: Path,
    progress: Progress, cluster: Mapping[str, Path] | None,
) -> None:  # fmt: skip
    wheels = cache / "wheels"
    download_wheels(lock=lock, directory=wheels, progress=progress)
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "tmp", prefix="image-") as tmp:
        work = Path(tmp)
        tree = work / "rootfs"
        tree.mkdir()
        progress("installing the Python layers (pip inside the Debian rootfs)")
        _run(["tar", "--extract", f"--file={rootfs.tar}", f"--directory={tree}"], what="unpacking the rootfs")
        staged = tree / "wheels"
        staged.mkdir()
        for locked in lock.wheels:
            shutil.copy2(wheel_for(directory=wheels, wheel=locked), staged)
        shutil.copy2(wheel, staged)
        dependencies = "".join(f"{w.line()}\n" for w in lock.without("pip"))
        _install_in_rootfs(rootfs=tree, requirements=dependencies, root="/layer-deps", extra=())
        fakedev_line = f"fakedev=={identity.version} --hash=sha256:{_sha256(wheel)}\n"
        _install_in_rootfs(rootfs=tree, requirements=fakedev_line, root="/layer-app", extra=())
        deps, app = tree / "layer-deps" / "usr" / "local", tree / "layer-app" / "usr" / "local"
        for layer in (deps, app):
            _normalize(layer, epoch=identity.epoch)
        binaries = _stage_cluster(cluster, work=work, epoch=identity.epoch) if cluster is not None else None
        progress("assembling the OCI image (umoci) and its archive (tar)")
        archive = work / target.name
        _assemble(work=work, rootfs=rootfs, deps=deps, app=app, identity=identity, archive=archive, cluster=binaries)
        _atomic_copy(archive, target)


def _stage_cluster(entries: Mapping[str, Path], *, work: Path, epoch: int) -> Path:
    """A copy of the control plane's cache entries, as the cache lays them out, with the image's one mtime."""
    tree = work / "cluster-cache"
    for name, entry in entries.items():
        target = tree / name
        target.mkdir(parents=True)
        for item in entry.iterdir():
            if item.is_file():
                shutil.copy2(item, target / item.name)
    _normalize(tree, epoch=epoch)
    return tree
