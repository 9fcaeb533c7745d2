"""The image's Python side, with pip: fakedev's own wheel, the lock of its dependencies, the locked wheels.

pip runs from the environment running this code (the project's venv); what it resolves and downloads is for the image's
interpreter (:data:`~harness.image.recipe.PYTHON_VERSION`, manylinux x86-64), never for the host's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.errors import ImageError
from harness.image.recipe import (
    PIP_VERSION,
    PYTHON_VERSION,
    WHEEL_PLATFORMS,
    Lock,
    LockedWheel,
    compute_image_requirements,
    lock_from_report,
    parse_lock,
    requirements_digest,
)

Progress = Callable[[str], None]
LOCK_PATH = Path("deploy/image/requirements.lock")


def _target_args() -> list[str]:
    platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
    return ["--only-binary=:all:", *platforms, "--python-version", PYTHON_VERSION, "--implementation", "cp"]


def _pip_env() -> dict[str, str]:
    env = dict(os.environ)
    # The machine may point pip at a local wheel directory; the image takes nothing the lock does not name.
    env.pop("PIP_FIND_LINKS", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip(args: Sequence[str], *, what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=cwd, env=_pip_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise ImageError(f"{what} failed (pip exit {done.returncode}):\n{tail}")


def image_requirements(*, project_root: Path) -> list[str]:
    pyproject = project_root / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text())
        dependencies = data["project"]["dependencies"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise ImageError(f"{pyproject}: cannot read [project] dependencies: {exc}") from exc
    try:
        return compute_image_requirements(dependencies)
    except ValueError as exc:
        raise ImageError(str(exc)) from exc


def resolve_lock(*, project_root: Path, progress: Progress) -> Lock:
    """Resolve the image's requirements on PyPI for the image's interpreter (``pip install --dry-run --report``)."""
    requirements = image_requirements(project_root=project_root)
    progress(f"resolving {len(requirements)} requirements for CPython {PYTHON_VERSION} manylinux x86-64")
    with tempfile.TemporaryDirectory(prefix="fakedev-image-lock-") as tmp:
        report = Path(tmp) / "report.json"
        _pip(
            [
                "install", "--dry-run", "--ignore-installed", "--quiet", f"--report={report}",
                f"--target={Path(tmp) / 'never-written'}", *_target_args(), f"pip=={PIP_VERSION}", *requirements,
            ],
            what="resolving the image's requirements",
        )  # fmt: skip
        try:
            return lock_from_report(report=json.loads(report.read_text()), digest=requirements_digest(requirements))
        except (ValueError, KeyError, TypeError) as exc:
            raise ImageError(f"pip's installation report: {exc}") from exc


def read_lock(*, project_root: Path) -> Lock:
    """The committed lock, refused when it was resolved from other requirements than pyproject.toml's."""
    path = project_root / LOCK_PATH
    try:
        lock = parse_lock(text=path.read_text(), path=path)
    except OSError as exc:
        raise ImageError(f"{path}: {exc.strerror}; create it with `fakedev image lock`") from exc
    except ValueError as exc:
        raise ImageError(str(exc)) from exc
    expected = requirements_digest(image_requirements(project_root=project_root))
    if lock.requirements_digest != expected:
        raise ImageError(
            f"{path} is stale: pyproject.toml's dependencies changed since it was resolved; run `fakedev image lock`"
        )
    return lock


def download_wheels(*, lock: Lock, directory: Path, progress: Progress) -> None:
    """Every locked wheel into ``directory`` (a cache: pip keeps the files that are there and checks their hashes)."""
    directory.mkdir(parents=True, exist_ok=True)
    missing = [w for w in lock.wheels if not _present(directory, w)]
    if not missing:
        return
    progress(f"downloading {len(missing)} wheels from PyPI")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="fakedev-image-") as requirements:
        requirements.write("".join(f"{w.line()}\n" for w in missing))
        requirements.flush()
        _pip(
            ["download", "--quiet", "--no-deps", "--require-hashes", *_target_args(), f"--dest={directory}",
             f"--requirement={requirements.name}"],
            what="downloading the image's wheels",
        )  # fmt: skip


def _present(directory: Path, wheel: LockedWheel) -> bool:
    return any(_sha256(path) == wheel.sha256 for path in directory.glob("*.whl"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_for(*, directory: Path, wheel: LockedWheel) -> Path:
    for path in sorted(directory.glob("*.whl")):
        if _sha256(path) == wheel.sha256:
            return path
    raise ImageError(f"no wheel with sha256 {wheel.sha256} for {wheel.name}=={wheel.version} in {directory}")


def source_files(*, project_root: Path) -> list[str]:
    """What git would commit: tracked files plus untracked ones that are not ignored (a working tree's state)."""
    done = subprocess.run(
        ["git", "-C", str(project_root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise ImageError(f"{project_root} is not a git checkout: {done.stderr.decode(errors='replace').strip()}")
    return sorted(name for name in done.stdout.decode().split("\0") if name and (project_root / name).exists())


def source_digest(*, project_root: Path, files: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for name in files:
        path = project_root / name
        content = str(path.readlink()).encode() if path.is_symlink() else path.read_bytes()
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def build_fakedev_wheel(*, project_root: Path, cache_dir: Path, epoch: int, progress: Progress) -> Path:
    """fakedev's wheel from a copy of the source tree (an in-tree build would pick up stale files in ``build/``),
    cached by the digest of that tree."""
    files = source_files(project_root=project_root)
    entry = cache_dir / source_digest(project_root=project_root, files=files)
    if wheels := sorted(entry.glob("fakedev-*.whl")):
        return wheels[0]
    progress(f"building fakedev's wheel from {len(files)} source files")
    with tempfile.TemporaryDirectory(prefix="fakedev-image-src-") as tmp:
        tree, out = Path(tmp) / "src", Path(tmp) / "out"
        tree.mkdir()
        for name in files:
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project_root / name, target, follow_symlinks=False)
        env = {**_pip_env(), "SOURCE_DATE_EPOCH": str(epoch)}
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", f"--wheel-dir={out}", str(tree)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ImageError(f"pip wheel {project_root} failed:\n{done.stderr.strip()[-2000:]}")
        built = sorted(out.glob("fakedev-*.whl"))
        if len(built) != 1:
            raise ImageError(f"pip wheel made {[p.name for p in built]}, expected one fakedev wheel")
        entry.mkdir(parents=True, exist_ok=True)
        partial = entry / f".{built[0].name}.partial"
        shutil.copy2(built[0], partial)
        partial.rename(entry / built[0].name)
        return entry / built[0].name
