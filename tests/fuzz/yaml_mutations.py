"""Hostile YAML for the fuzz targets of profiles and scenarios, and the rules every example is held to.

Inputs come in three families, all derived from the files fakedev ships so that most of them get past the YAML layer
and into the validation behind it:

- tree mutations: a shipped file loaded as data, one to four edits (a value swapped for another type or a hostile
  token, a key dropped, duplicated, renamed or made a non-string, a tag, an anchor and alias, deep nesting, a list
  grown past its cap), written back as YAML with one top-level key per line;
- line mutations: the file's own text with lines dropped, doubled, swapped, truncated or replaced by hostile ones;
- raw input: arbitrary bytes, YAML punctuation soup, and shipped files with bytes flipped (often not UTF-8).

Settings and figures come from :mod:`tests.fuzz.fuzzing` (``FAKEDEV_FUZZ_EXAMPLES`` for the standing run);
``FAKEDEV_FUZZ_SEED`` replays one seed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.fuzz.fuzzing import Figures, fuzz_settings

REPO = Path(__file__).resolve().parents[2]
SEED = os.environ.get("FAKEDEV_FUZZ_SEED")
CI_EXAMPLES = 200
DEADLINE_SECONDS = 2.0
"""CPU seconds per example (CPU, not wall-clock: the machine is shared, and other processes' load is not ours). The
readers answer in milliseconds, rendering the largest allowed profile takes 0.2 s; the old readers took 9 s and more
on an alias bomb."""
MEMORY_HEADROOM = 1 << 30
POSITIONED_ERROR: Final = re.compile(r"^fuzz\.yaml:\d+(:\d+)?: \S")
"""What every refusal of a fuzzed file looks like: the file and a line (and a column when YAML itself refused it)."""
"""Address space an example may add to the process before allocations fail (a MemoryError fails the test)."""

_F = TypeVar("_F", bound=Callable[..., None])
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def fuzz_target(test: _F) -> _F:
    """Hypothesis settings for a YAML target (200 examples in CI), the CPU deadline being the test's own."""
    configured: _F = fuzz_settings(examples=CI_EXAMPLES, deadline_seconds=None)(test)
    if SEED is not None:
        configured = hypothesis_seed(int(SEED))(configured)
    return configured


# -- the rules every example is held to ------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Stats:
    """What a target did, printed after its module (visible with ``-s``)."""

    name: str
    examples: int = 0
    refused: int = 0
    accepted: int = 0
    slowest: float = 0.0
    slowest_size: int = 0
    started: float = field(default_factory=time.perf_counter)

    def restart(self) -> None:
        self.started = time.perf_counter()

    def record(self, *, seconds: float, size: int, accepted: bool) -> None:
        self.examples += 1
        self.accepted += accepted
        self.refused += not accepted
        if seconds > self.slowest:
            self.slowest, self.slowest_size = seconds, size

    def summary(self) -> str:
        return (
            f"{self.name}: {self.examples} examples ({self.accepted} accepted, {self.refused} refused), slowest "
            f"{self.slowest * 1000:.1f} ms CPU ({self.slowest_size} bytes), {time.perf_counter() - self.started:.1f} s"
        )


def _address_space() -> int:
    with Path("/proc/self/statm").open() as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def bounded(stats: Stats, *, data: str | bytes, figures: Figures) -> Iterator[Callable[[], None]]:
    """Run one example (``data``, whose encoded size is recorded) with at most :data:`MEMORY_HEADROOM` more
    address space, then check its time; ``figures`` gets it for the table ``make fuzz`` prints.

    The caller calls the yielded function once the input was accepted (not refused).
    """
    size = len(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    accepted = False

    def accept() -> None:
        nonlocal accepted
        accepted = True

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    started = time.process_time()
    try:
        yield accept
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    seconds = time.process_time() - started
    stats.record(seconds=seconds, size=size, accepted=accepted)
    figures.examples += 1
    figures.slowest_ms = max(figures.slowest_ms, seconds * 1e3)
    if seconds >= DEADLINE_SECONDS:
        figures.failures += 1
    assert seconds < DEADLINE_SECONDS, f"one example took {seconds:.2f} CPU seconds"


def assert_no_nan(value: object, *, where: str = "") -> None:
    """Nothing handed to a caller holds a NaN or an infinity, however deep."""
    if isinstance(value, float):
        assert math.isfinite(value), f"{where} is {value}"
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_no_nan(item, where=f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            assert_no_nan(item, where=f"{where}[{index}]")
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            assert_no_nan(getattr(value, name), where=f"{where}.{name}")


# -- seeds -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Seed:
    """A shipped file: its text, and its content as data (loaded once, not per example)."""

    name: str
    text: str
    tree: Any


def seed_files(*patterns: str) -> list[Seed]:
    """The shipped files matching ``patterns`` (relative to the repository)."""
    paths = sorted({p for pattern in patterns for p in REPO.glob(pattern)})
    texts = [(str(p.relative_to(REPO)), p.read_text(encoding="utf-8")) for p in paths]
    return [Seed(name=name, text=text, tree=yaml.load(text, Loader=_LOADER)) for name, text in texts]


# -- an emitter that can write what PyYAML's cannot: duplicate keys, tags, anchors, raw tokens --------------------


@dataclass(frozen=True, kw_only=True)
class Raw:
    """YAML text written as it is."""

    text: str


@dataclass(frozen=True, kw_only=True)
class Pairs:
    """A mapping as key/value pairs: keys may repeat or be anything."""

    items: tuple[tuple[object, object], ...]


@dataclass(frozen=True, kw_only=True)
class Tagged:
    tag: str
    value: object


def emit(value: object) -> str:
    """One value in flow style."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Tagged):
        return f"{value.tag} {emit(value.value)}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ".nan"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a YAML double-quoted scalar
    if isinstance(value, dict):
        value = Pairs(items=tuple(value.items()))
    if isinstance(value, Pairs):
        return "{" + ", ".join(f"{_key(k)}: {emit(v)}" for k, v in value.items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(emit(item) for item in value) + "]"
    raise TypeError(type(value))


def _key(key: object) -> str:
    # A key that is not a plain string is written as an explicit key ("? [a] : b"), which YAML allows anywhere.
    return emit(key) if isinstance(key, str) else f"? {emit(key)} "


def emit_document(value: object) -> str:
    """A document with one top-level key per line, so that errors land on distinct lines."""
    if isinstance(value, dict):
        value = Pairs(items=tuple(value.items()))
    if isinstance(value, Pairs):
        return "".join(f"{_key(k)}: {emit(v)}\n" for k, v in value.items)
    return emit(value) + "\n"


# -- hostile values --------------------------------------------------------------------------------------------------

HOSTILE_TOKENS = (
    ".nan",
    ".inf",
    "-.inf",
    "1.0e+999",
    "!!float 1e999",
    "0x7fffffffffffffff",
    "0x8000000000000000",
    "-9223372036854775809",
    "1" + "0" * 30,
    "9" * 5000,
    "0b",
    "!!int ''",
    "017",
    "0o17",
    "1_000",
    "190:20:30",
    "2024-01-01",
    "2001-12-14t21:59:43.10-05:00",
    "yes",
    "off",
    "~",
    "''",
    '"\\x00"',
    '"\\ud800"',
    '"\\uffff"',
    "!!python/name:os.system",
    "!!python/object/apply:os.system ['true']",
    "!foo bar",
    "!<tag:example.com,2000:x> y",
    "!!binary aGk=",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "!!int x",
    "!!float x",
    "!!bool x",
    "!!null x",
    "!!str 12",
    "!!timestamp 2024-01-01",
    "*undefined",
    "&a 1",
    "&a [1, 2]",
    "{<<: {a: 1}}",
    "{? [a] : b}",
    "{? {a: 1} : b}",
    "{1: a}",
    "{true: a}",
    "{null: a}",
    "{a: 1, a: 2}",
    "[&a [x, x], [*a, *a], [*a, *a, *a]]",
    "'unterminated",
    "[unclosed",
    "{unclosed",
    "a: b: c",
    "@reserved",
    "`backtick",
    "%YAML 1.2",
    "!",
    "? x",
    "|",
    ">-",
    "-",
    "[]",
    "{}",
    "[[]]",
    "'0000:ff:1f.7'",
    "'pci0000:ff'",
    "'pci0000:00'",
    "'0-8191'",
    "'0-8192'",
    "'0-400000000'",
    "'8191'",
    "'0,0'",
    "'3-1'",
    "'²'",
    "'1g.10gb'",
    "'7g.80gb'",
    "static",
    "disabled",
    "mig-backed",
    "time-sliced",
    "infiniband",
    "connectx-7",
    "h100-sxm5-80gb",
    "a100-sxm4-40gb",
    "b200-180gb",
    "'*'",
    "NodePrepareResources",
    "ready",
    "fails",
    "100m",
    "'0.001'",
    "16Gi",
    "Healthy",
    "NoExecute",
    "driver-kill",
    "device-health",
    "seed-example",
    "first",
)


def _deep(depth: int, *, mapping: bool) -> Raw:
    return Raw(text=("{a: " * depth + "x" + "}" * depth) if mapping else ("[" * depth + "]" * depth))


def hostile_values(pool: tuple[object, ...]) -> st.SearchStrategy[object]:
    """Values to put where a shipped file had something sensible: other types, tokens, sizes, depth."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from((0, -1, 1, 7, 8, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 1023, 8191, 65520)),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.sampled_from(pool) if pool else st.none(),
    )
    raw = st.one_of(
        st.sampled_from(HOSTILE_TOKENS).map(lambda t: Raw(text=t)),
        st.integers(min_value=1, max_value=3000).flatmap(
            lambda depth: st.booleans().map(lambda mapping: _deep(depth, mapping=mapping))
        ),
        st.integers(min_value=60_000, max_value=70_000).map(lambda n: "x" * n),
        st.integers(min_value=300, max_value=5000).map(lambda n: Raw(text="1" + "0" * n)),
    )
    nested = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.text(max_size=8), inner, max_size=4),
        ),
        max_leaves=8,
    )
    return st.one_of(scalars, raw, nested)


# -- tree mutations --------------------------------------------------------------------------------------------------

Path_ = tuple[object, ...]


def _paths(value: object, prefix: Path_ = ()) -> list[Path_]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


def _get(value: Any, path: Path_) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: Path_, new: object) -> Any:
    """A copy of ``value`` with ``path`` replaced (the root when the path is empty)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_set(v, rest, new) if k == head else v) for k, v in value.items()}
    copy = list(value)
    copy[head] = _set(copy[head], rest, new)  # type: ignore[call-overload]
    return copy


def _scalars(value: object) -> list[object]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in _scalars(item)]
    if isinstance(value, list):
        return [s for item in value for s in _scalars(item)]
    return [value]


# Repeats weight the draw: most edits put another plausible or hostile value into one field, so that most examples
# get past the YAML layer and into the rules behind it.
EDITS = (
    *("replace",) * 3,
    *("swap",) * 4,
    *("drop",) * 2,
    "duplicate-key",
    "rename-key",
    "odd-key",
    "tag",
    "anchor",
    "deepen",
    *("grow",) * 2,
)


@st.composite
def tree_mutation(draw: st.DrawFn, seeds: list[Seed]) -> str:
    """A shipped file, loaded, edited one to four times, and written back."""
    tree: Any = draw(st.sampled_from(seeds)).tree
    pool = tuple({repr(s): s for s in _scalars(tree)}.values())
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        # The root is left alone: replacing a whole file is what the raw family does.
        paths = _paths(tree)[1:] or [()]
        path = draw(st.sampled_from(paths))
        target = _get(tree, path)
        edit = draw(st.sampled_from(EDITS))
        parent_path, last = path[:-1], (path[-1] if path else None)
        parent = _get(tree, parent_path) if path else None
        if edit == "replace" or (edit in ("drop", "duplicate-key", "rename-key", "odd-key") and parent is None):
            tree = _set(tree, path, draw(hostile_values(pool)))
        elif edit == "drop" and isinstance(parent, dict):
            tree = _set(tree, parent_path, {k: v for k, v in parent.items() if k != last})
        elif edit == "drop" and isinstance(parent, list):
            tree = _set(tree, parent_path, [v for i, v in enumerate(parent) if i != last])
        elif edit in ("duplicate-key", "rename-key", "odd-key") and isinstance(parent, dict):
            if edit == "duplicate-key":
                new_key: object = last
            elif edit == "rename-key":
                new_key = draw(st.sampled_from(("colour", "Name", "name ", "", "gpus", "steps", "timeout")))
            else:
                new_key = draw(st.sampled_from((Raw(text="[a]"), Raw(text="{a: 1}"), 1, True, None, 1.5)))
            items = [(k, v) for k, v in parent.items() if edit == "duplicate-key" or k != last]
            tree = _set(tree, parent_path, Pairs(items=(*items, (new_key, target))))
        elif edit == "tag":
            tag = draw(st.sampled_from(("!!python/name:os.system", "!foo", "!!str", "!!int", "!!float", "!!map", "!")))
            tree = _set(tree, path, Tagged(tag=tag, value=target))
        elif edit == "anchor":
            tree = _set(tree, path, Raw(text=f"&x {emit(target)}" if draw(st.booleans()) else "*x"))
        elif edit == "deepen":
            depth = draw(st.one_of(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=200)))
            tree = _set(tree, path, Raw(text="[" * depth + emit(target) + "]" * depth))
        elif edit == "grow" and isinstance(target, list) and target:
            tree = _set(tree, path, target * draw(st.integers(min_value=2, max_value=80)))
        elif edit == "swap":
            tree = _set(tree, path, draw(st.sampled_from(pool)) if pool else None)
        # Anything else (a grow on a non-list, an edit whose parent became a Pairs) leaves the tree as it was.
        if not isinstance(tree, dict | list):
            break
    return emit_document(tree)


# -- line mutations and raw input ------------------------------------------------------------------------------------

HOSTILE_LINES = (
    "a: &a [x, x, x]",
    "b: [*a, *a, *a]",
    "? [complex]",
    ": key",
    "{a: 1}: b",
    "<<: {name: x}",
    "name: dup",
    "  - {product: h100-sxm5-80gb, root: 'pci0000:50', mig: {mode: static, instances: [{profile: 7g.80gb, start: 0}]}}",
    "  - {apply: first, timeout: .nan}",
    "  - {wait: {pod: [p]}, timeout: -5}",
    "  - {fault: prepare-fault, failTimes: 99999999999, delaySeconds: 1e999}",
    "description: !!python/name:os.system",
    "\t- tab",
    "--- !!set",
    "%TAG ! tag:example.com,2000:",
    "...",
    "'",
    "[",
    "}",
    "x" * 2000,
)


@st.composite
def line_mutation(draw: st.DrawFn, seeds: list[Seed]) -> str:
    """A shipped file's text with lines dropped, doubled, swapped, cut or replaced."""
    lines = draw(st.sampled_from(seeds)).text.splitlines()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if not lines:
            break
        i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        edit = draw(st.sampled_from(("drop", "double", "swap", "cut", "insert", "value")))
        if edit == "drop":
            del lines[i]
        elif edit == "double":
            lines.insert(i, lines[i])
        elif edit == "swap":
            j = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif edit == "cut":
            lines[i] = lines[i][: draw(st.integers(min_value=0, max_value=len(lines[i])))]
        elif edit == "insert":
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines.insert(i, indent + draw(st.sampled_from(HOSTILE_LINES)))
        elif ": " in lines[i]:
            head = lines[i].split(": ", 1)[0]
            lines[i] = f"{head}: {draw(st.sampled_from(HOSTILE_TOKENS))}"
    return "\n".join(lines) + "\n"


YAML_SOUP = st.text(alphabet=st.sampled_from(list("{}[],:-?!&*#|>'\"%@`~. \n\t\\abcxyz0123456789é\x85\u2028")))


@st.composite
def raw_input(draw: st.DrawFn, seeds: list[Seed]) -> bytes:
    """Arbitrary bytes, punctuation soup, or a shipped file with bytes flipped, inserted or cut."""
    kind = draw(st.sampled_from(("bytes", "soup", "flipped")))
    if kind == "bytes":
        return draw(st.binary(max_size=4096))
    if kind == "soup":
        return str(draw(YAML_SOUP)).encode()
    data = bytearray(draw(st.sampled_from(seeds)).text.encode())
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        at = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        data[at:at] = draw(st.binary(min_size=1, max_size=4))
    if draw(st.booleans()):
        del data[draw(st.integers(min_value=0, max_value=len(data))) :]
    return bytes(data)


def documents(seeds: list[Seed]) -> st.SearchStrategy[str | bytes]:
    """Every family, the structured ones drawn more often."""
    return st.one_of(tree_mutation(seeds), tree_mutation(seeds), line_mutation(seeds), raw_input(seeds))
