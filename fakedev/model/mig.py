"""MIG geometry: profile shapes (GI ids, valid starts, sizes), per-product profile tables, placements and layouts.

A GPU has 8 memory slices and 7 compute slices and holds at most 7 GPU instances. An instance occupies a run of
memory slices ``[start, start + size)``; each profile shape allows only certain starts, and instances never overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

MEMORY_SLICES: Final = 8
COMPUTE_SLICES: Final = 7
MAX_GPU_INSTANCES: Final = 7
MIB: Final = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class MigShape:
    """What every MIG-capable product (A100, H100, H200, B200) shares for one profile class."""

    label: str
    gi_profile_id: int  # nvidia-smi's GPU instance profile ID
    starts: tuple[int, ...]
    size: int  # in memory slices
    compute_slices: int
    max_per_gpu: int
    media_extensions: bool = False


SHAPE_1G: Final = MigShape(
    label="1g", gi_profile_id=19, starts=(0, 1, 2, 3, 4, 5, 6), size=1, compute_slices=1, max_per_gpu=7
)
SHAPE_1G_ME: Final = MigShape(
    label="1g+me",
    gi_profile_id=20,
    starts=(0, 1, 2, 3, 4, 5, 6),
    size=1,
    compute_slices=1,
    max_per_gpu=1,
    media_extensions=True,
)
SHAPE_1G_DOUBLE: Final = MigShape(
    label="1g double memory", gi_profile_id=15, starts=(0, 2, 4, 6), size=2, compute_slices=1, max_per_gpu=4
)
SHAPE_2G: Final = MigShape(label="2g", gi_profile_id=14, starts=(0, 2, 4), size=2, compute_slices=2, max_per_gpu=3)
SHAPE_3G: Final = MigShape(label="3g", gi_profile_id=9, starts=(0, 4), size=4, compute_slices=3, max_per_gpu=2)
SHAPE_4G: Final = MigShape(label="4g", gi_profile_id=5, starts=(0,), size=4, compute_slices=4, max_per_gpu=1)
SHAPE_7G: Final = MigShape(label="7g", gi_profile_id=0, starts=(0,), size=8, compute_slices=7, max_per_gpu=1)

SHAPES: Final = (SHAPE_1G, SHAPE_1G_ME, SHAPE_1G_DOUBLE, SHAPE_2G, SHAPE_3G, SHAPE_4G, SHAPE_7G)


@dataclass(frozen=True, kw_only=True)
class Engines:
    """Hardware units of a GPU instance (or of the whole GPU): the NVIDIA driver's capacities and counters."""

    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int


@dataclass(frozen=True, kw_only=True)
class MigProfile:
    """One product's profile, e.g. H100 ``1g.10gb``: a shape plus that product's engines and memory."""

    name: str
    shape: MigShape
    engines: Engines
    memory_mib: int

    @property
    def gi_profile_id(self) -> int:
        return self.shape.gi_profile_id

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    def placements(self) -> tuple[Placement, ...]:
        return tuple(Placement(start=start, size=self.shape.size) for start in self.shape.starts)


@dataclass(frozen=True, kw_only=True, order=True)
class Placement:
    """``{start, size}`` in memory slices, as ``nvidia-smi mig -lgipp`` prints it."""

    start: int
    size: int

    @property
    def memory_slices(self) -> range:
        return range(self.start, self.start + self.size)

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, kw_only=True)
class LayoutInstance:
    profile: MigProfile
    start: int

    @property
    def placement(self) -> Placement:
        return Placement(start=self.start, size=self.profile.shape.size)


@dataclass(frozen=True, kw_only=True)
class LayoutProblem:
    """A broken rule, pointing at the instance (by position) that broke it."""

    index: int
    rule: str


def check_layout(instances: Sequence[LayoutInstance], *, full: Engines) -> list[LayoutProblem]:
    """Every rule a set of GPU instances on one GPU must satisfy; an empty list means the layout is valid."""
    problems: list[LayoutProblem] = []
    if len(instances) > MAX_GPU_INSTANCES:
        problems.append(
            LayoutProblem(index=MAX_GPU_INSTANCES, rule=f"a GPU holds at most {MAX_GPU_INSTANCES} GPU instances")
        )
    per_profile: dict[str, int] = {}
    compute = 0
    multiprocessors = 0
    for index, inst in enumerate(instances):
        shape = inst.profile.shape
        if inst.start not in shape.starts:
            valid = ", ".join(str(s) for s in shape.starts)
            problems.append(
                LayoutProblem(
                    index=index, rule=f"{inst.profile.name} cannot start at memory slice {inst.start} (valid: {valid})"
                )
            )
            continue
        for earlier_index, earlier in enumerate(instances[:index]):
            if earlier.start in earlier.profile.shape.starts and earlier.placement.overlaps(inst.placement):
                problems.append(
                    LayoutProblem(
                        index=index,
                        rule=f"{inst.profile.name}@{inst.start} overlaps {earlier.profile.name}@{earlier.start} "
                        f"(instance {earlier_index}) on memory slices",
                    )
                )
                break
        per_profile[inst.profile.name] = per_profile.get(inst.profile.name, 0) + 1
        if per_profile[inst.profile.name] > shape.max_per_gpu:
            problems.append(
                LayoutProblem(index=index, rule=f"at most {shape.max_per_gpu} × {inst.profile.name} fit on one GPU")
            )
        compute += shape.compute_slices
        multiprocessors += inst.profile.engines.multiprocessors
        if compute > COMPUTE_SLICES or multiprocessors > full.multiprocessors:
            problems.append(
                LayoutProblem(
                    index=index, rule=f"the instances need more than the GPU's {COMPUTE_SLICES} compute slices"
                )
            )
    return problems
