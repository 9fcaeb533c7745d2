"""The binary cache: a warm call rebuilds nothing; a partial, corrupt or stale entry is detected and rebuilt."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.cluster.build import BinaryGroup, GoProgram, build_group, cache_entry, check_cache, compute_ldflags
from harness.errors import BuildError

HELLO = Path(__file__).resolve().parents[1] / "data" / "gomod" / "hello"


def _group(source: Path, *, cgo: bool = False) -> BinaryGroup:
    return BinaryGroup(
        group="hello",
        module="hello",
        version="v0.0.1",
        programs=(GoProgram(name="hello", package="fakedev.local/hello"),),
        version_ldflags=False,
        source=source,
        cgo=cgo,
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    dst = tmp_path / "src"
    dst.mkdir()
    for f in HELLO.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _build(group: BinaryGroup, cache: Path) -> list[str]:
    messages: list[str] = []
    build_group(group=group, cache_root=cache, progress=messages.append)
    return messages


def test_cold_build_caches_a_runnable_binary_with_a_manifest(source: Path, tmp_path: Path) -> None:
    group = _group(source)
    messages = _build(group, tmp_path / "cache")
    binary = cache_entry(group=group, cache_root=tmp_path / "cache") / "hello"
    assert subprocess.run([binary], capture_output=True, text=True, check=True).stdout == "hello from the cache test\n"
    manifest = json.loads((binary.parent / "manifest.json").read_text())
    assert set(manifest["binaries"]) == {"hello"}
    assert any(m.startswith("building hello v0.0.1 (not built yet)") for m in messages)
    assert any(m.startswith("compiling hello") for m in messages)


def test_warm_call_rebuilds_nothing(source: Path, tmp_path: Path) -> None:
    group = _group(source)
    _build(group, tmp_path / "cache")
    assert _build(group, tmp_path / "cache") == []


def test_corrupt_binary_is_detected_and_rebuilt(source: Path, tmp_path: Path) -> None:
    group = _group(source)
    _build(group, tmp_path / "cache")
    binary = cache_entry(group=group, cache_root=tmp_path / "cache") / "hello"
    binary.write_bytes(binary.read_bytes()[:1000])
    assert "does not match its recorded SHA-256" in (check_cache(group=group, cache_root=tmp_path / "cache") or "")
    messages = _build(group, tmp_path / "cache")
    assert any("corrupt" in m for m in messages)
    assert subprocess.run([binary], capture_output=True, check=True).returncode == 0


def test_interrupted_build_without_manifest_is_rebuilt(source: Path, tmp_path: Path) -> None:
    group = _group(source)
    _build(group, tmp_path / "cache")
    (cache_entry(group=group, cache_root=tmp_path / "cache") / "manifest.json").unlink()
    assert "manifest.json is missing" in (check_cache(group=group, cache_root=tmp_path / "cache") or "")
    assert _build(group, tmp_path / "cache")[0].startswith("building hello")


def test_changed_recipe_invalidates_the_cache(source: Path, tmp_path: Path) -> None:
    group = _group(source)
    _build(group, tmp_path / "cache")
    (source / "go.mod").write_text((source / "go.mod").read_text() + "\n// changed\n")
    assert check_cache(group=group, cache_root=tmp_path / "cache") == (
        "the wrapper module or build flags changed since it was built"
    )


def test_compile_error_is_reported_with_the_compiler_output(source: Path, tmp_path: Path) -> None:
    (source / "main.go").write_text("package main\n\nfunc main() { undefinedThing() }\n")
    with pytest.raises(BuildError, match="undefined: undefinedThing"):
        _build(_group(source), tmp_path / "cache")
    assert not cache_entry(group=_group(source), cache_root=tmp_path / "cache").exists()


CGO_MAIN = """package main

// int answer(void) { return 42; }
import "C"

import "fmt"

func main() { fmt.Println("cgo says", C.answer()) }
"""


def test_cgo_group_compiles_its_c_code(source: Path, tmp_path: Path) -> None:
    (source / "main.go").write_text(CGO_MAIN)
    group = _group(source, cgo=True)
    _build(group, tmp_path / "cache")
    binary = cache_entry(group=group, cache_root=tmp_path / "cache") / "hello"
    assert subprocess.run([binary], capture_output=True, text=True, check=True).stdout == "cgo says 42\n"


def test_pure_go_group_does_not_compile_c_code(source: Path, tmp_path: Path) -> None:
    # With CGO_ENABLED=0 go leaves out every file that imports "C", so nothing defines main.
    (source / "main.go").write_text(CGO_MAIN)
    with pytest.raises(BuildError, match="build constraints exclude all Go files"):
        _build(_group(source, cgo=False), tmp_path / "cache")


def test_entry_built_without_cgo_is_rebuilt_with_cgo(source: Path, tmp_path: Path) -> None:
    _build(_group(source, cgo=False), tmp_path / "cache")
    cgo_group = _group(source, cgo=True)
    assert check_cache(group=cgo_group, cache_root=tmp_path / "cache") == (
        "the wrapper module or build flags changed since it was built"
    )
    assert _build(cgo_group, tmp_path / "cache")[0].startswith("building hello v0.0.1 (the wrapper module")
    assert check_cache(group=cgo_group, cache_root=tmp_path / "cache") is None


def test_version_ldflags_stamp_component_base_and_client_go() -> None:
    flags = compute_ldflags(version="v1.37.2")
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.37.2" in flags
        assert f"-X {pkg}.gitMinor=37" in flags
