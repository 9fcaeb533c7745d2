"""Build the control-plane binaries from the Go module proxy and cache them per version.

The Go recipes are wrapper modules kept in ``gomod/`` (``go.mod`` + ``go.sum``): ``k8s.io/kubernetes`` cannot be
``go install``-ed because it replaces its staging modules with local paths, so the wrapper requires it and points each
staging module at its published ``v0.<minor>.<patch>`` release (see :mod:`harness.cluster.gomod`).

A cache entry is a directory ``<cache>/<group>/<version>/`` holding the binaries and ``manifest.json`` with each
binary's SHA-256 and the digest of the recipe that built it. An entry whose manifest, hashes or recipe do not match is
rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final, TypedDict

from harness.errors import BuildError

KUBERNETES_VERSION: Final = "v1.37.2"
ETCD_VERSION: Final = "v3.7.3"
BUILD_TAGS: Final = "selinux,notest,grpcnotrace"
HEARTBEAT_SECONDS: Final = 15.0

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class GoProgram:
    """One binary built from a wrapper module."""

    name: str
    package: str


@dataclass(frozen=True, kw_only=True)
class BinaryGroup:
    """Binaries built together from one wrapper module and cached under one version directory."""

    group: str
    module: str
    version: str
    programs: tuple[GoProgram, ...]
    version_ldflags: bool
    source: Path | None = None
    """The wrapper module's directory; ``None`` means the one shipped in ``gomod/<module>``."""
    tags: str = BUILD_TAGS
    extra_ldflags: str = ""
    """Linker flags besides ``-s -w`` and the Kubernetes version stamps (e.g. another project's version variable)."""
    own_sources: bool = False
    """The module's directory holds the program's own Go sources (part of the recipe), not only go.mod/go.sum."""
    cgo: bool = False
    """Build with ``CGO_ENABLED=1`` (needs a C compiler and libc headers); every other group is pure Go."""

    @property
    def source_dir(self) -> Path:
        return self.source if self.source is not None else module_dir(self.module)


CONTROL_PLANE: Final = BinaryGroup(
    group="k8s",
    module="kubernetes",
    version=KUBERNETES_VERSION,
    programs=(
        GoProgram(name="kube-apiserver", package="k8s.io/kubernetes/cmd/kube-apiserver"),
        GoProgram(name="kube-scheduler", package="k8s.io/kubernetes/cmd/kube-scheduler"),
        GoProgram(name="kube-controller-manager", package="k8s.io/kubernetes/cmd/kube-controller-manager"),
    ),
    version_ldflags=True,
)
ETCD: Final = BinaryGroup(
    group="etcd",
    module="etcd",
    version=ETCD_VERSION,
    programs=(GoProgram(name="etcd", package="go.etcd.io/etcd/server/v3"),),
    version_ldflags=False,
)
DEFAULT_GROUPS: Final = (CONTROL_PLANE, ETCD)

CONTAINERD_VERSION: Final = "v2.4.2"
"""The newest containerd 2 release the Go module proxy served when this was written (2.4.x reads config v3 and v4)."""
KUBELET: Final = BinaryGroup(
    group="kubelet",
    module="kubernetes",
    version=KUBERNETES_VERSION,
    programs=(GoProgram(name="kubelet", package="k8s.io/kubernetes/cmd/kubelet"),),
    version_ldflags=True,
)
CONTAINERD: Final = BinaryGroup(
    group="containerd",
    module="containerd",
    version=CONTAINERD_VERSION,
    programs=(
        GoProgram(name="containerd", package="github.com/containerd/containerd/v2/cmd/containerd"),
        GoProgram(
            name="containerd-shim-runc-v2", package="github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
        ),
        GoProgram(name="ctr", package="github.com/containerd/containerd/v2/cmd/ctr"),
    ),
    version_ldflags=False,
    tags="no_btrfs",  # btrfs needs cgo; CGO_ENABLED=0 builds without it
    extra_ldflags=f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}",
)


def own_program(name: str) -> BinaryGroup:
    """One program whose Go sources ship in ``gomod/<name>`` (module ``fakedev.local/<name>``)."""
    return BinaryGroup(
        group=name,
        module=name,
        version="v1",
        programs=(GoProgram(name=name, package=f"fakedev.local/{name}"),),
        version_ldflags=False,
        own_sources=True,
    )


PAUSE: Final = own_program("pause")
RUNC_VERSION: Final = "v1.5.3"
"""runc >= 1.4 moves a container's ``linux.netDevices`` into its namespace (runtime-spec 1.3.0)."""
RUNC: Final = BinaryGroup(
    group="runc",
    module="runc",
    version=RUNC_VERSION,
    programs=(GoProgram(name="runc", package="github.com/opencontainers/runc"),),
    version_ldflags=False,
    # libcontainer/nsenter is C that runs before the Go runtime, so cgo is required. `seccomp` (libseccomp-dev,
    # pkg-config) because containerd gives every pod sandbox the RuntimeDefault profile and a runc without it
    # refuses any profile; no `libpathrs` (a Rust library). `runc --version` comes from the embedded VERSION.
    cgo=True,
    tags="seccomp,urfave_cli_no_docs",
)
CNI_PLUGINS_VERSION: Final = "v1.10.0"
CNI_PLUGINS: Final = BinaryGroup(
    group="cni-plugins",
    module="cni-plugins",
    version=CNI_PLUGINS_VERSION,
    programs=(
        GoProgram(name="bridge", package="github.com/containernetworking/plugins/plugins/main/bridge"),
        GoProgram(name="host-local", package="github.com/containernetworking/plugins/plugins/ipam/host-local"),
        GoProgram(name="loopback", package="github.com/containernetworking/plugins/plugins/main/loopback"),
        GoProgram(name="portmap", package="github.com/containernetworking/plugins/plugins/meta/portmap"),
    ),
    version_ldflags=False,
    tags="",
    # Without the stamp the plugins call themselves "version unknown" in their VERSION/usage output.
    extra_ldflags="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion="
    + CNI_PLUGINS_VERSION,
)
NODE_GROUPS: Final = (KUBELET, CONTAINERD, PAUSE, RUNC, CNI_PLUGINS)
"""What a real node needs on top of the control plane (``fakedev cluster build --with-node``)."""

HELM_VERSION: Final = "v4.3.2"
HELM: Final = BinaryGroup(
    group="helm",
    module="helm",
    version=HELM_VERSION,
    programs=(GoProgram(name="helm", package="helm.sh/helm/v4/cmd/helm"),),
    version_ldflags=False,
    tags="",
    # Without the stamp `helm version` says v4.3 and charts' kubeVersion checks see the wrong release.
    extra_ldflags=f"-X helm.sh/helm/v4/internal/version.version={HELM_VERSION} "
    "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
)
TOOL_GROUPS: Final = (HELM,)
"""Tools for installing fakedev into a cluster (``fakedev cluster build --with-helm``): the chart's tests use helm."""


class Manifest(TypedDict):
    version: str
    recipe: str
    binaries: dict[str, str]
    buildSeconds: float


@dataclass(frozen=True, kw_only=True)
class BinarySet:
    """Where every cached binary of a build lives."""

    paths: dict[str, Path]

    def path(self, name: str) -> Path:
        try:
            return self.paths[name]
        except KeyError:
            raise BuildError(f"binary {name!r} was not built; known: {sorted(self.paths)}") from None


def default_cache_root() -> Path:
    """``$FAKEDEV_CACHE`` or ``$XDG_CACHE_HOME/fakedev`` or ``~/.cache/fakedev``."""
    if env := os.environ.get("FAKEDEV_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fakedev"


def compute_ldflags(*, version: str) -> str:
    """The version stamps upstream's build sets, so ``/version`` reports the release and not v0.0.0-master."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


def module_dir(module: str) -> Path:
    """The wrapper module shipped inside this package."""
    return Path(str(resources.files("harness.cluster") / "gomod" / module))


def compute_recipe_digest(*, group: BinaryGroup, go_mod: bytes, go_sum: bytes) -> str:
    """Everything that changes the output of a build, hashed; a different recipe invalidates the cache."""
    h = hashlib.sha256()
    for part in (
        group.version.encode(),
        go_mod,
        go_sum,
        group.tags.encode(),
        compute_ldflags(version=group.version).encode() if group.version_ldflags else b"",
        ",".join(p.package for p in group.programs).encode(),
        *((group.extra_ldflags.encode(),) if group.extra_ldflags else ()),
        *((_source_digest(group).encode(),) if group.own_sources else ()),
        # Only when on, so the digests (and caches) of the pure-Go groups stay what they were.
        *((b"CGO_ENABLED=1",) if group.cgo else ()),
    ):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def _source_digest(group: BinaryGroup) -> str:
    """A module whose own Go sources are built (not only its go.mod): they are part of the recipe."""
    h = hashlib.sha256()
    for path in sorted(group.source_dir.glob("*.go")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _recipe_digest(group: BinaryGroup) -> str:
    src = group.source_dir
    return compute_recipe_digest(
        group=group, go_mod=(src / "go.mod").read_bytes(), go_sum=(src / "go.sum").read_bytes()
    )


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def cache_entry(*, group: BinaryGroup, cache_root: Path) -> Path:
    return cache_root / group.group / group.version


def check_cache(*, group: BinaryGroup, cache_root: Path) -> str | None:
    """Return ``None`` when the cache entry is complete and intact, else why it must be rebuilt."""
    entry = cache_entry(group=group, cache_root=cache_root)
    manifest_path = entry / "manifest.json"
    if not manifest_path.is_file():
        return "not built yet" if not entry.exists() else f"{manifest_path} is missing (interrupted build?)"
    try:
        manifest: Manifest = json.loads(manifest_path.read_text())
        recipe, binaries = manifest["recipe"], manifest["binaries"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"{manifest_path} is unreadable: {exc}"
    if recipe != _recipe_digest(group):
        return "the wrapper module or build flags changed since it was built"
    for program in group.programs:
        binary = entry / program.name
        if not binary.is_file():
            return f"{binary} is missing"
        if not os.access(binary, os.X_OK):
            return f"{binary} is not executable"
        if _sha256_file(binary) != binaries.get(program.name):
            return f"{binary} does not match its recorded SHA-256 (corrupt or modified)"
    return None


def compute_go_env(*, base: dict[str, str], gopath_workdir: Path, cgo: bool) -> dict[str, str]:
    """The environment of every go command of a build: the caller's, with the settings a recipe depends on forced."""
    env = dict(base)
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="1" if cgo else "0", GOFLAGS="-mod=readonly", GOWORK="off")
    env.setdefault("GOPROXY", "https://proxy.golang.org,direct")
    env["TMPDIR"] = str(gopath_workdir)
    return env


def which_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain was not found on PATH; install Go >= 1.26.8 (https://go.dev/dl/)")
    return go


def _check_c_compiler(*, group: BinaryGroup) -> None:
    """Fail with the fix before go does with a cgo error deep in its output."""
    cc = os.environ.get("CC") or "gcc"
    if shutil.which(cc.split()[0]) is None:
        raise BuildError(
            f"{group.group} is built with cgo and needs a C compiler, but {cc!r} is not on PATH; "
            "install gcc and libc6-dev (`make deps`)"
        )
    if "seccomp" in group.tags.split(","):
        found = (
            subprocess.run(["pkg-config", "--exists", "libseccomp"], capture_output=True, check=False)
            if (shutil.which("pkg-config"))
            else None
        )
        if found is None or found.returncode != 0:
            raise BuildError(
                f"{group.group} is built with the seccomp tag and needs libseccomp's headers through pkg-config; "
                "install libseccomp-dev and pkg-config (`make deps`)"
            )


def _run_with_heartbeat(
    argv: list[str], *, cwd: Path, env: dict[str, str], label: str, progress: Progress, total: int | None
) -> list[str]:
    """Run a go command, counting the package lines it prints, and report every few seconds."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while True:
        try:
            proc.wait(timeout=HEARTBEAT_SECONDS)
            break
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            count = f"{len(lines)}/{total}" if total else str(len(lines))
            progress(f"{label}: {count} packages, {_fmt_elapsed(elapsed)} elapsed")
    reader.join()
    if proc.stdout is not None:
        proc.stdout.close()
    if proc.returncode != 0:
        tail = "\n".join(lines[-40:])
        raise BuildError(f"{label} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return lines


def _fmt_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def build_group(*, group: BinaryGroup, cache_root: Path, progress: Progress, force: bool = False) -> BinarySet:
    """Return the group's cached binaries, building them first when the cache is missing, stale or corrupt."""
    entry = cache_entry(group=group, cache_root=cache_root)
    reason = "forced" if force else check_cache(group=group, cache_root=cache_root)
    if reason is None:
        return BinarySet(paths={p.name: entry / p.name for p in group.programs})
    progress(f"building {group.group} {group.version} ({reason})")
    go = which_go()
    if group.cgo:
        _check_c_compiler(group=group)
    entry.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".build-{group.version}-", dir=entry.parent) as tmp:
        work = Path(tmp)
        src = work / "src"
        shutil.copytree(group.source_dir, src)
        out = work / "out"
        out.mkdir()
        gotmp = work / "gotmp"
        gotmp.mkdir()
        env = compute_go_env(base=dict(os.environ), gopath_workdir=gotmp, cgo=group.cgo)
        packages = [p.package for p in group.programs]
        deps = _run_with_heartbeat(
            [go, "list", "-tags", group.tags, "-deps", *packages],
            cwd=src,
            env=env,
            label=f"{group.group}: downloading modules",
            progress=progress,
            total=None,
        )
        total = len([d for d in deps if d and not d.startswith("go: ")])
        progress(f"{group.group}: {total} packages to compile ({_fmt_elapsed(time.monotonic() - started)})")
        ldflags = compute_ldflags(version=group.version) if group.version_ldflags else "-s -w"
        if group.extra_ldflags:
            ldflags += " " + group.extra_ldflags
        for program in group.programs:
            t0 = time.monotonic()
            progress(f"compiling {program.name} {group.version}")
            _run_with_heartbeat(
                [
                    go,
                    "build",
                    "-v",
                    "-trimpath",
                    "-tags",
                    group.tags,
                    "-ldflags",
                    ldflags,
                    "-o",
                    str(out / program.name),
                    program.package,
                ],
                cwd=src,
                env=env,
                label=f"compiling {program.name}",
                progress=progress,
                total=total,
            )
            progress(f"built {program.name} in {_fmt_elapsed(time.monotonic() - t0)}")
        manifest: Manifest = {
            "version": group.version,
            "recipe": _recipe_digest(group),
            "binaries": {p.name: _sha256_file(out / p.name) for p in group.programs},
            "buildSeconds": round(time.monotonic() - started, 1),
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if entry.exists():
            shutil.rmtree(entry)
        out.rename(entry)
    progress(f"{group.group} {group.version} ready in {_fmt_elapsed(time.monotonic() - started)}: {entry}")
    return BinarySet(paths={p.name: entry / p.name for p in group.programs})


def build_binaries(
    *,
    cache_root: Path | None = None,
    progress: Progress,
    force: bool = False,
    groups: Iterable[BinaryGroup] = DEFAULT_GROUPS,
) -> BinarySet:
    """Build (or reuse) every group and return all their binaries."""
    root = cache_root or default_cache_root()
    paths: dict[str, Path] = {}
    for group in groups:
        paths.update(build_group(group=group, cache_root=root, progress=progress, force=force).paths)
    return BinarySet(paths=paths)


def cached_binaries(*, cache_root: Path | None = None, groups: Iterable[BinaryGroup] = DEFAULT_GROUPS) -> BinarySet:
    """The cached binaries, or a :class:`BuildError` saying to run ``fakedev cluster build`` first."""
    root = cache_root or default_cache_root()
    paths: dict[str, Path] = {}
    for group in groups:
        if (reason := check_cache(group=group, cache_root=root)) is not None:
            raise BuildError(
                f"{group.group} {group.version} binaries are not usable ({reason}); run `fakedev cluster build`"
            )
        paths.update({p.name: cache_entry(group=group, cache_root=root) / p.name for p in group.programs})
    return BinarySet(paths=paths)


def helm_binary(*, cache_root: Path | None = None) -> Path:
    """The cached helm (built by ``fakedev cluster build --with-helm``, which ``make build`` runs), or a
    :class:`BuildError` saying how to build it."""
    return cached_binaries(cache_root=cache_root, groups=TOOL_GROUPS).path("helm")
