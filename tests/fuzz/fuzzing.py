"""What every fuzz target shares: its Hypothesis settings, the figures it reports, and input strategies.

Two modes. By default (CI, ``pytest tests/fuzz``) each target runs a few hundred examples derandomized — the seed
comes from the test itself, so every run draws the same inputs and a failure reproduces with the same command — and
keeps no example database. ``FAKEDEV_FUZZ_EXAMPLES=N`` (``make fuzz``) is the standing run: N examples per target,
a fresh random seed each time (to find something new), and a database under the temp dir (never the repository) so
that a failure found is tried first on the next run.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

EXAMPLES_ENV: Final = "FAKEDEV_FUZZ_EXAMPLES"
HOME: Final = Path(tempfile.gettempdir()) / "fakedev-hypothesis"
"""Hypothesis's own files (its cache of the constants in our sources, the standing run's database)."""
MAX_INPUT: Final = 1 << 20
"""Inputs reach up to 1 MiB: the bounds on time and memory are asserted for anything below that."""
PURE_SECONDS: Final = 10.0
"""The bound on one example of a parser: ten times the slowest seen, so that on a busy shared machine (where a
trivial input once stalled for two seconds) only a hang or a blow-up trips it."""
MARKS: Final = [
    pytest.mark.fuzz,
    # Hypothesis warns when it prints a megabyte-sized failing example; the failure is what matters then.
    pytest.mark.filterwarnings("ignore:Generating overly large repr"),
]

set_hypothesis_home_dir(HOME)  # before any test runs, so Hypothesis never creates .hypothesis/ in the checkout


def standing_examples() -> int | None:
    value = os.environ.get(EXAMPLES_ENV, "")
    return int(value) if value else None


def fuzz_settings(*, examples: int, deadline_seconds: float | None) -> settings:
    """Settings for one target: ``examples`` in CI (or the standing count), each example within the deadline (None:
    the target asserts its own, e.g. in CPU time, which a busy shared machine does not inflate)."""
    standing = standing_examples()
    return settings(
        max_examples=standing or examples,
        deadline=None if deadline_seconds is None else timedelta(seconds=deadline_seconds),
        derandomize=standing is None,
        database=None if standing is None else DirectoryBasedExampleDatabase(HOME / "examples"),
        print_blob=True,
        # Big inputs are the point here; the `figures` fixture is shared by a target's examples on purpose.
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
        ],
    )


@dataclass(kw_only=True)
class Figures:
    """One target's run: how many examples, how many failed, the slowest, and the most memory one needed."""

    examples: int = 0
    failures: int = 0
    slowest_ms: float = 0.0
    peak_heap_mb: float = 0.0
    """The largest Python heap one example allocated (tracemalloc), for targets that measure it."""
    rss_growth_mb: float | None = None
    """Growth of the process under test's peak RSS over the run, for targets that fuzz a process."""

    @contextlib.contextmanager
    def example(self, *, max_seconds: float, max_heap_mb: float | None = None) -> Iterator[None]:
        """Time one example (and measure its heap when ``max_heap_mb`` is given); asserts both bounds."""
        if max_heap_mb is not None:
            tracemalloc.start()
        started = time.perf_counter()
        try:
            yield
            elapsed = time.perf_counter() - started
            assert elapsed < max_seconds, f"one example took {elapsed:.2f} s (bound: {max_seconds} s)"
            if max_heap_mb is not None:
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                self.peak_heap_mb = max(self.peak_heap_mb, peak)
                assert peak < max_heap_mb, f"one example allocated {peak:.1f} MiB (bound: {max_heap_mb} MiB)"
        except BaseException:
            self.failures += 1
            raise
        finally:
            if max_heap_mb is not None:
                tracemalloc.stop()
            self.examples += 1
            self.slowest_ms = max(self.slowest_ms, (time.perf_counter() - started) * 1e3)

    def as_property(self) -> dict[str, Any]:
        return asdict(self)


# -- strategies ------------------------------------------------------------------------------------------------

TEXT: Final = st.characters(exclude_categories=["Cs"])
"""Any character that UTF-8 (and so protobuf) can carry: controls, separators, bidi marks, astral planes."""


def _sizes(limit: int) -> st.SearchStrategy[int]:
    """Any size up to ``limit``, half the time from its upper half (Hypothesis prefers small numbers)."""
    return st.one_of(
        st.integers(min_value=1, max_value=limit), st.integers(min_value=max(limit // 2, 1), max_value=limit)
    )


def repeated(pieces: st.SearchStrategy[bytes], *, limit: int = MAX_INPUT) -> st.SearchStrategy[bytes]:
    """A drawn piece repeated up to ``limit`` bytes: big inputs without drawing every byte."""
    return st.tuples(pieces.filter(bool), _sizes(limit)).map(
        lambda drawn: (drawn[0] * (drawn[1] // len(drawn[0]) + 1))[: drawn[1]]
    )


def big_text(*, limit: int) -> st.SearchStrategy[str]:
    """A short drawn text repeated to any length up to ``limit`` characters."""
    return st.tuples(st.text(TEXT, min_size=1, max_size=8), _sizes(limit)).map(
        lambda drawn: (drawn[0] * (drawn[1] // len(drawn[0]) + 1))[: drawn[1]]
    )


def hostile_text(*, limit: int = 100_000) -> st.SearchStrategy[str]:
    """Names as an attacker would send them: empty, any characters, path tricks, or very long."""
    return st.one_of(
        st.text(TEXT, max_size=80),
        st.sampled_from(["", ".", "..", "../../etc", "a/b", "a\nb", "a\x00b", " ", "-", "A", "x" * 64, "x" * 254]),
        big_text(limit=limit),
    )


JSON_SCALARS: Final = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(TEXT, max_size=40),
)


def json_values(*, leaves: st.SearchStrategy[Any] = JSON_SCALARS, max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """Any JSON document (objects keyed by text)."""
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=6), st.dictionaries(st.text(TEXT, max_size=20), inner, max_size=6)
        ),
        max_leaves=max_leaves,
    )


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with bytes flipped, cut off, inserted or appended — a damaged copy of a valid input."""
    data = bytearray(original)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "append", "append-big"]))
        at = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=64))
        elif len(data) < MAX_INPUT:
            data += draw(repeated(st.binary(min_size=1, max_size=4), limit=MAX_INPUT - len(data)))
    return bytes(data)
