"""A build's recipe: the go environment a group gets (cgo on or off) and the digest that decides a cache rebuild."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cluster.build import (
    CNI_PLUGINS,
    DEFAULT_GROUPS,
    NODE_GROUPS,
    RUNC,
    TOOL_GROUPS,
    BinaryGroup,
    GoProgram,
    compute_go_env,
    compute_recipe_digest,
)

GO_MOD = b"module fakedev.local/hello\n"

# The digest this group had before groups could turn cgo on: the pure-Go groups' caches must stay valid.
DIGEST_BEFORE_CGO = "25af04485e4ddf737c073478d27f328b4360f00dcdc76993083db4858c24997d"


def _group(*, cgo: bool = False) -> BinaryGroup:
    return BinaryGroup(
        group="hello",
        module="hello",
        version="v0.0.1",
        programs=(GoProgram(name="hello", package="fakedev.local/hello"),),
        version_ldflags=False,
        tags="",
        extra_ldflags="-X main.v=1",
        cgo=cgo,
    )


def _digest(group: BinaryGroup) -> str:
    return compute_recipe_digest(group=group, go_mod=GO_MOD, go_sum=b"")


@pytest.mark.parametrize(("cgo", "expected"), [(False, "0"), (True, "1")], ids=["pure-go", "cgo"])
def test_go_env_sets_cgo_from_the_group(cgo: bool, expected: str) -> None:
    # The caller's own CGO_ENABLED never decides: the recipe does.
    env = compute_go_env(base={"CGO_ENABLED": "1" if expected == "0" else "0"}, gopath_workdir=Path("/t"), cgo=cgo)
    assert env["CGO_ENABLED"] == expected


def test_go_env_keeps_the_callers_caches_and_pins_the_toolchain() -> None:
    env = compute_go_env(base={"GOCACHE": "/c", "GOTOOLCHAIN": "auto"}, gopath_workdir=Path("/t"), cgo=True)
    assert (env["GOCACHE"], env["GOTOOLCHAIN"], env["GOFLAGS"], env["TMPDIR"]) == ("/c", "local", "-mod=readonly", "/t")


def test_cgo_changes_the_recipe_digest() -> None:
    assert _digest(_group(cgo=True)) != _digest(_group(cgo=False))


def test_pure_go_digest_is_unchanged_by_the_cgo_field() -> None:
    assert _digest(_group(cgo=False)) == DIGEST_BEFORE_CGO


def test_only_runc_is_built_with_cgo() -> None:
    """A cgo group needs gcc and libc6-dev (``make deps``); the rest build with no C toolchain."""
    cgo_groups = {g.group for g in (*DEFAULT_GROUPS, *NODE_GROUPS, *TOOL_GROUPS) if g.cgo}
    assert cgo_groups == {"runc"}


def test_real_node_groups_include_runc_and_the_cni_plugins() -> None:
    assert {RUNC, CNI_PLUGINS} <= set(NODE_GROUPS)
    # containerd gives every sandbox the RuntimeDefault seccomp profile: a runc without seccomp refuses it.
    assert "seccomp" in RUNC.tags.split(",")
