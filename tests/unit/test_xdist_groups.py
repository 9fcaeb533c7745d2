"""`make test` runs ``--dist loadgroup`` and relies on an ``xdist_group`` staying on one worker (the real-node
modules share the host's kubepods cgroup and kubelet ports). pytest 9.2 made node ids read-only and pytest-xdist's
grouping silently stopped working; this fails when the installed pair does that again."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.xdist_group(name="xdist-groups-meta")]


def test_an_xdist_group_runs_on_one_worker(pytester: pytest.Pytester) -> None:
    for module in ("first", "second", "third"):
        pytester.makepyfile(
            **{
                f"test_{module}": f"""
                import os
                import pytest

                pytestmark = [pytest.mark.xdist_group(name="together")]

                def test_{module}() -> None:
                    print("WORKER", os.environ["PYTEST_XDIST_WORKER"], flush=True)
                    raise AssertionError(os.environ["PYTEST_XDIST_WORKER"])
                """
            }
        )
    for n in range(12):
        pytester.makepyfile(**{f"test_filler_{n}": "def test_filler() -> None:\n    pass\n"})
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")
    workers = {line.split()[-1] for line in result.outlines if line.startswith("E       AssertionError: gw")}
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.outlines[-20:]
    assert len(workers) == 1, f"one xdist_group ran on workers {sorted(workers)}: pytest-xdist grouping is broken"
