"""Generate, or check, the Python modules compiled from ``kubeletapi/protos/*.proto``.

    python -m kubeletapi.generate            # rewrite kubeletapi/*_pb2*.py[i] from the protos
    python -m kubeletapi.generate --check    # exit 1 with a diff summary if the committed modules drifted

Both paths compile into a fresh temporary directory first, so they cannot disagree. protoc sees each proto under the
virtual directory ``kubeletapi/`` (``--proto_path=kubeletapi=<protos dir>``); that is what makes the generated
``*_pb2_grpc`` modules import ``from kubeletapi import x_pb2`` and gives every file a unique name in the protobuf
descriptor pool, without rewriting generated text.

The output is a pure function of the protos and the generator versions (the protoc bundled with grpcio-tools, its gRPC
plugin, mypy-protobuf): no paths, times or hashes of this machine end up in it. A different generator version is
reported as drift on purpose, because the generated modules carry runtime guards derived from it (the protobuf gencode
version and ``GRPC_GENERATED_VERSION``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from kubeletapi.errors import GenerationError

PACKAGE_DIR: Final = Path(__file__).resolve().parent
PROTO_DIR: Final = PACKAGE_DIR / "protos"
# The directory name protoc believes the protos live in; it becomes the import prefix of the generated modules.
IMPORT_PACKAGE: Final = "kubeletapi"
GENERATED_SUFFIXES: Final = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
# protoc plugins shipped by mypy-protobuf; typed stubs for the messages and for the gRPC stubs/servicers.
_MYPY_PLUGINS: Final = ("protoc-gen-mypy", "protoc-gen-mypy_grpc")
_EXCERPT_LINES: Final = 12

DriftKind = Literal["changed", "missing", "stale"]


@dataclass(frozen=True, kw_only=True)
class Drift:
    """One generated file that differs from what the protos produce."""

    name: str
    kind: DriftKind
    added: int = 0
    removed: int = 0
    excerpt: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        """One line for humans, e.g. ``changed  dra_v1_pb2.py (+2 -1 lines)``."""
        if self.kind == "changed":
            return f"changed  {self.name} (+{self.added} -{self.removed} lines)"
        if self.kind == "missing":
            return f"missing  {self.name} (the protos produce it, it is not committed)"
        return f"stale    {self.name} (committed, but no proto produces it any more)"


def is_generated_name(name: str) -> bool:
    """Whether a file name in the package directory belongs to the generator (and may be rewritten or deleted)."""
    return name.endswith(GENERATED_SUFFIXES)


def compute_drift(*, expected: Mapping[str, bytes], committed: Mapping[str, bytes]) -> tuple[Drift, ...]:
    """Compare fresh output with the committed files (both keyed by file name), sorted by name."""
    drifts: list[Drift] = []
    for name in sorted(expected.keys() | committed.keys()):
        want, have = expected.get(name), committed.get(name)
        if want == have:
            continue
        if want is None:
            drifts.append(Drift(name=name, kind="stale"))
        elif have is None:
            drifts.append(Drift(name=name, kind="missing"))
        else:
            drifts.append(_changed(name=name, want=want, have=have))
    return tuple(drifts)


def _changed(*, name: str, want: bytes, have: bytes) -> Drift:
    diff = list(
        difflib.unified_diff(
            have.decode(errors="replace").splitlines(),
            want.decode(errors="replace").splitlines(),
            fromfile=f"committed/{name}",
            tofile=f"generated/{name}",
            lineterm="",
            n=0,
        )
    )
    body = [line for line in diff if not line.startswith(("---", "+++", "@@"))]
    return Drift(
        name=name,
        kind="changed",
        added=sum(1 for line in body if line.startswith("+")),
        removed=sum(1 for line in body if line.startswith("-")),
        excerpt=tuple(diff[:_EXCERPT_LINES]),
    )


def list_protos(*, proto_dir: Path = PROTO_DIR) -> tuple[Path, ...]:
    """The proto sources, sorted so the protoc command line (and any error) is the same everywhere."""
    protos = tuple(sorted(proto_dir.glob("*.proto")))
    if not protos:
        raise GenerationError(f"no .proto files in {proto_dir}")
    return protos


def compile_protos(*, proto_dir: Path = PROTO_DIR) -> dict[str, bytes]:
    """Run protoc on every proto into a temporary directory; return the generated files by name."""
    protos = list_protos(proto_dir=proto_dir)
    plugins = [f"--plugin={name}={_find_plugin(name)}" for name in _MYPY_PLUGINS]
    with tempfile.TemporaryDirectory(prefix="kubeletapi-gen-") as tmp:
        out = Path(tmp)
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={IMPORT_PACKAGE}={proto_dir}",
            *plugins,
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            # Sync-only gRPC stubs: fakedev and the emulator use the threaded grpc API, and the sync+async flavour
            # only type-checks with types-grpcio installed (here grpc is untyped, so it would fail mypy --strict).
            f"--mypy_grpc_out={out}",
            *(f"{IMPORT_PACKAGE}/{proto.name}" for proto in protos),
        ]
        try:
            result = subprocess.run(command, cwd=out, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise GenerationError(f"cannot run {sys.executable} -m grpc_tools.protoc: {exc}") from exc
        if result.returncode != 0:
            raise GenerationError(
                f"grpc_tools.protoc exited with {result.returncode} for {proto_dir}: {result.stderr.strip()}"
                " (is the dev extra with grpcio-tools and mypy-protobuf installed?)"
            )
        generated = out / IMPORT_PACKAGE
        files = {path.name: path.read_bytes() for path in sorted(generated.iterdir()) if is_generated_name(path.name)}
    if not files:
        raise GenerationError(f"grpc_tools.protoc produced no modules from {proto_dir}")
    return files


def _find_plugin(name: str) -> str:
    # Prefer the plugin installed next to this interpreter (the venv's bin/), so a stray one on PATH from another
    # mypy-protobuf version cannot change the output.
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise GenerationError(f"{name} not found next to {sys.executable} or on PATH; install mypy-protobuf")
    return found


def read_committed(*, package_dir: Path = PACKAGE_DIR) -> dict[str, bytes]:
    """The generated files currently in the package directory, by name."""
    return {path.name: path.read_bytes() for path in sorted(package_dir.iterdir()) if is_generated_name(path.name)}


def check(*, package_dir: Path = PACKAGE_DIR, proto_dir: Path = PROTO_DIR) -> tuple[Drift, ...]:
    """Regenerate in a temporary directory and report how the committed files differ; empty means in sync."""
    expected = compile_protos(proto_dir=proto_dir)
    return compute_drift(expected=expected, committed=read_committed(package_dir=package_dir))


def regenerate(*, package_dir: Path = PACKAGE_DIR, proto_dir: Path = PROTO_DIR) -> tuple[Drift, ...]:
    """Bring the committed files in line with the protos; return what had to change."""
    expected = compile_protos(proto_dir=proto_dir)
    drifts = compute_drift(expected=expected, committed=read_committed(package_dir=package_dir))
    for drift in drifts:
        target = package_dir / drift.name
        if drift.kind == "stale":
            target.unlink()
            continue
        # Replace atomically so an importer never sees a half-written module.
        staging = target.with_name(f".{target.name}.tmp")
        staging.write_bytes(expected[drift.name])
        staging.replace(target)
    return drifts


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: regenerate, or with ``--check`` only compare; exit 1 on drift, 2 when generation fails."""
    parser = argparse.ArgumentParser(
        prog="python -m kubeletapi.generate",
        description="Generate kubeletapi/*_pb2*.py[i] from kubeletapi/protos/*.proto with grpcio-tools and "
        "mypy-protobuf.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write anything; exit 1 and print a diff summary if the committed modules differ from what "
        "the protos produce (same generator versions required)",
    )
    args = parser.parse_args(argv)
    try:
        drifts = check() if args.check else regenerate()
    except GenerationError as exc:
        print(f"kubeletapi.generate: {exc}", file=sys.stderr)
        return 2
    if not drifts:
        print("kubeletapi: generated modules match the protos")
        return 0
    if not args.check:
        done = [f"  {'removed' if drift.kind == 'stale' else 'wrote'}  {drift.name}" for drift in drifts]
        print("\n".join(["kubeletapi: regenerated", *done]))
        return 0
    lines = [f"kubeletapi: {len(drifts)} generated file(s) out of date with kubeletapi/protos:"]
    for drift in drifts:
        lines.append(f"  {drift.summary()}")
        lines.extend(f"      {line}" for line in drift.excerpt)
    lines.append("run `python -m kubeletapi.generate` and commit the result")
    print("\n".join(lines), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
