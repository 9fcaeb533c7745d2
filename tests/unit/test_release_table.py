"""The release × attribute table (``fakedev profile schemas``) and its copy in docs/profiles.md."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from fakedev.cli import main
from fakedev.model.inventory import resolve_inventory
from fakedev.model.releases import DranetRelease, NvidiaRelease
from fakedev.render import Schema, render_node
from fakedev.render.release_table import (
    BEGIN_MARKER,
    DRANET_REFERENCE_NODES,
    END_MARKER,
    NVIDIA_REFERENCE_NODES,
    PublishedKind,
    committed_block,
    compute_release_tables,
    published_kind,
    reference_profile,
    render_markdown,
    replace_block,
)

DOC: Final = Path(__file__).parents[2] / "docs" / "profiles.md"


def test_the_committed_table_is_what_the_renderers_give() -> None:
    # Regenerate with `make release-table` when a renderer changes what a release publishes.
    assert committed_block(DOC.read_text(encoding="utf-8")) == render_markdown(compute_release_tables())


def test_every_release_is_a_column() -> None:
    nvidia, dranet = compute_release_tables()
    assert nvidia.columns == tuple(f"nvidia@{r.value}" for r in NvidiaRelease)
    assert dranet.columns == tuple(f"dranet@{r.value}" for r in DranetRelease)


REFERENCES: Final = [
    *((Schema.NVIDIA, r, k) for r, nodes in NVIDIA_REFERENCE_NODES.items() for k in nodes),
    *((Schema.DRANET, r, k) for r, nodes in DRANET_REFERENCE_NODES.items() for k in nodes),
]


@pytest.mark.parametrize(
    ("schema", "release", "kinds"),
    REFERENCES,
    ids=[f"{s.value}@{r.value}/{'+'.join(sorted(k))}" for s, r, k in REFERENCES],
)
def test_each_reference_node_renders_the_kinds_it_asks_for(
    schema: Schema, release: NvidiaRelease | DranetRelease, kinds: frozenset[PublishedKind]
) -> None:
    # The table's reference nodes state which kinds each release publishes: the render must agree, or the table
    # would silently leave a kind out.
    profile = reference_profile(schema=schema, release=release, kinds=kinds)
    rendered = render_node(resolve_inventory(profile, node_name="n"), schemas=[schema])
    assert {published_kind(d) for d in rendered.devices.values()} == set(kinds)


def test_no_release_before_v25_12_0_has_dynamic_mig_or_vfio() -> None:
    [node] = NVIDIA_REFERENCE_NODES[NvidiaRelease.V25_8_1]
    assert node == {PublishedKind.GPU, PublishedKind.MIG}


def test_vfio_and_dynamic_mig_are_never_on_one_reference_node() -> None:
    for nodes in NVIDIA_REFERENCE_NODES.values():
        for kinds in nodes:
            assert not (PublishedKind.VFIO in kinds and PublishedKind.DYN_MIG in kinds)


def test_replace_block_keeps_the_text_around_the_markers() -> None:
    document = f"intro\n{BEGIN_MARKER}\nold\n{END_MARKER}\noutro\n"
    updated = replace_block(document, block="new\n")
    assert updated == f"intro\n{BEGIN_MARKER}\nnew\n{END_MARKER}\noutro\n"
    assert committed_block(updated) == "new\n"


def test_replace_block_refuses_a_document_without_markers() -> None:
    with pytest.raises(ValueError, match="release-table:begin"):
        replace_block("no markers here\n", block="x\n")


def test_cli_prints_a_text_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "schemas"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# gpu.nvidia.com"
    assert lines[1].split() == ["ATTRIBUTE/CAPACITY", *(f"nvidia@{r.value}" for r in NvidiaRelease)]
    assert "# dra.net" in lines


def test_cli_updates_the_marked_block(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_text(f"# Doc\n\n{BEGIN_MARKER}\nstale\n{END_MARKER}\n\nafter\n", encoding="utf-8")
    assert main(["profile", "schemas", "--markdown", "--update", str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert committed_block(text) == render_markdown(compute_release_tables())
    assert text.startswith("# Doc\n\n") and text.endswith(f"{END_MARKER}\n\nafter\n")
    assert capsys.readouterr().out == ""


def test_cli_update_needs_markdown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_text(f"{BEGIN_MARKER}\n{END_MARKER}\n", encoding="utf-8")
    assert main(["profile", "schemas", "--update", str(path)]) == 2
    assert "--markdown" in capsys.readouterr().err
