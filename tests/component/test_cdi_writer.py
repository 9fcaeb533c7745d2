"""Writing spec files atomically into a real (temp) CDI directory, and removing them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from cdi import (
    ContainerEdits,
    Device,
    Mount,
    PathEscapeError,
    Spec,
    SpecError,
    WriteError,
    load_spec_file,
    remove_spec,
    remove_specs_with_prefix,
    write_spec,
)


def metadata_spec(value: str = "1") -> Spec:
    return Spec(
        version="0.5.0",
        kind="fake.example.com/metadata",
        devices=(
            Device(
                name="uid1_req",
                container_edits=ContainerEdits(
                    env=(f"VALUE={value}",),
                    mounts=(Mount(host_path="/tmp/m", container_path="/var/run/m", options=("ro", "bind")),),
                ),
            ),
        ),
    )


class CrashError(Exception):
    """Stands for the process dying at the crash point."""


@pytest.fixture
def cdi_dir(tmp_path: Path) -> Path:
    return tmp_path / "cdi"


@pytest.mark.parametrize("file_name", ["fake_uid1.json", "fake_uid1.yaml"], ids=["json", "yaml"])
def test_written_spec_round_trips(cdi_dir: Path, file_name: str) -> None:
    path = write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name=file_name)

    assert path == cdi_dir / file_name
    assert load_spec_file(path) == metadata_spec()


def test_written_json_uses_cdi_keys(cdi_dir: Path) -> None:
    path = write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name="fake_uid1.json")

    assert json.loads(path.read_text())["devices"][0]["containerEdits"]["mounts"][0]["containerPath"] == "/var/run/m"


def test_written_file_is_0644_and_no_temp_file_remains(cdi_dir: Path) -> None:
    write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name="fake_uid1.json")

    assert [p.name for p in cdi_dir.iterdir()] == ["fake_uid1.json"]
    assert stat.S_IMODE((cdi_dir / "fake_uid1.json").stat().st_mode) == 0o644


def test_a_rewrite_replaces_the_content(cdi_dir: Path) -> None:
    write_spec(spec=metadata_spec("1"), cdi_dir=cdi_dir, file_name="fake_uid1.json")
    write_spec(spec=metadata_spec("2"), cdi_dir=cdi_dir, file_name="fake_uid1.json")

    assert load_spec_file(cdi_dir / "fake_uid1.json") == metadata_spec("2")


def test_at_the_crash_point_the_new_content_is_complete_and_the_old_file_untouched(cdi_dir: Path) -> None:
    write_spec(spec=metadata_spec("old"), cdi_dir=cdi_dir, file_name="fake_uid1.json")
    seen: dict[str, object] = {}

    def crash_before_rename(temp: Path) -> None:
        seen["temp_name"] = temp.name
        seen["temp_spec"] = json.loads(temp.read_text())
        seen["target_spec"] = load_spec_file(cdi_dir / "fake_uid1.json")
        raise CrashError

    with pytest.raises(CrashError):
        write_spec(
            spec=metadata_spec("new"), cdi_dir=cdi_dir, file_name="fake_uid1.json", before_rename=crash_before_rename
        )

    assert seen["temp_spec"] == metadata_spec("new").to_json()
    assert seen["target_spec"] == metadata_spec("old")
    assert str(seen["temp_name"]).startswith(".fake_uid1.json.")
    assert [p.name for p in cdi_dir.iterdir()] == ["fake_uid1.json"]
    assert load_spec_file(cdi_dir / "fake_uid1.json") == metadata_spec("old")


@pytest.mark.parametrize(
    "file_name",
    [
        pytest.param("../escape.json", id="parent"),
        pytest.param("sub/dir.json", id="subdir"),
        pytest.param("/etc/cdi/abs.json", id="absolute"),
        pytest.param("..", id="dotdot"),
        pytest.param(".hidden.json", id="hidden"),
        pytest.param("", id="empty"),
    ],
)
def test_a_name_escaping_the_directory_is_refused(tmp_path: Path, file_name: str) -> None:
    cdi_dir = tmp_path / "cdi"

    with pytest.raises(PathEscapeError):
        write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name=file_name)

    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_name_runtimes_would_ignore_is_refused(cdi_dir: Path) -> None:
    with pytest.raises(WriteError, match=r"must end in \.json or \.yaml"):
        write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name="fake.yml")


def test_an_invalid_spec_is_not_written(cdi_dir: Path) -> None:
    bad = Spec(version="0.5.0", kind="nokind", devices=(Device(name="d", container_edits=ContainerEdits()),))

    with pytest.raises(SpecError, match=r"fake_uid1\.json: \$\.kind"):
        write_spec(spec=bad, cdi_dir=cdi_dir, file_name="fake_uid1.json")

    assert not (cdi_dir / "fake_uid1.json").exists()


def test_remove_spec_removes_the_file_and_is_idempotent(cdi_dir: Path) -> None:
    write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name="fake_uid1.json")

    first = remove_spec(cdi_dir=cdi_dir, file_name="fake_uid1.json")
    second = remove_spec(cdi_dir=cdi_dir, file_name="fake_uid1.json")

    assert (first, second, list(cdi_dir.iterdir())) == (True, False, [])


def test_remove_spec_also_clears_leftovers_of_a_crashed_write(cdi_dir: Path) -> None:
    cdi_dir.mkdir()
    (cdi_dir / ".fake_uid1.json.abc123.tmp").write_text("partial")
    (cdi_dir / ".other.json.abc123.tmp").write_text("partial")

    remove_spec(cdi_dir=cdi_dir, file_name="fake_uid1.json")

    assert [p.name for p in cdi_dir.iterdir()] == [".other.json.abc123.tmp"]


def test_remove_by_prefix_takes_only_matching_specs_and_their_leftovers(cdi_dir: Path) -> None:
    for name in ("drv_metadata_uid1_a.json", "drv_metadata_uid1_b.json", "drv_metadata_uid2_a.json", "drv_uid1.json"):
        write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name=name)
    (cdi_dir / ".drv_metadata_uid1_c.json.xyz.tmp").write_text("partial")

    removed = remove_specs_with_prefix(cdi_dir=cdi_dir, prefix="drv_metadata_uid1_")

    assert [p.name for p in removed] == ["drv_metadata_uid1_a.json", "drv_metadata_uid1_b.json"]
    assert sorted(p.name for p in cdi_dir.iterdir()) == ["drv_metadata_uid2_a.json", "drv_uid1.json"]


def test_remove_by_prefix_treats_glob_characters_literally(cdi_dir: Path) -> None:
    write_spec(spec=metadata_spec(), cdi_dir=cdi_dir, file_name="drv_uid1.json")

    assert remove_specs_with_prefix(cdi_dir=cdi_dir, prefix="*") == ()
    assert [p.name for p in cdi_dir.iterdir()] == ["drv_uid1.json"]


@pytest.mark.parametrize("prefix", ["../", "", ".", "a/b"], ids=["parent", "empty", "dot", "slash"])
def test_remove_by_prefix_refuses_unsafe_prefixes(cdi_dir: Path, prefix: str) -> None:
    with pytest.raises(PathEscapeError):
        remove_specs_with_prefix(cdi_dir=cdi_dir, prefix=prefix)


def test_removing_from_a_missing_directory_is_a_no_op(tmp_path: Path) -> None:
    assert remove_specs_with_prefix(cdi_dir=tmp_path / "absent", prefix="drv_") == ()
