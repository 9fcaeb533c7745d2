"""The GPU catalogue against the tables in shared/reference/devices.md (and the sources cited in catalog.py)."""

from __future__ import annotations

import pytest

from fakedev.model import catalog, mig
from fakedev.model.catalog import GpuProduct
from fakedev.model.mig import LayoutInstance, check_layout

# (GI id, valid starts, size, max per GPU) per profile class — devices.md §1.
SHAPES = {
    "1g": (19, (0, 1, 2, 3, 4, 5, 6), 1, 7),
    "1g+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 1),
    "1g double memory": (15, (0, 2, 4, 6), 2, 4),
    "2g": (14, (0, 2, 4), 2, 3),
    "3g": (9, (0, 4), 4, 2),
    "4g": (5, (0,), 4, 1),
    "7g": (0, (0,), 8, 1),
}


@pytest.mark.parametrize("shape", mig.SHAPES, ids=[s.label for s in mig.SHAPES])
def test_shape_matches_reference(shape: mig.MigShape) -> None:
    assert (shape.gi_profile_id, shape.starts, shape.size, shape.max_per_gpu) == SHAPES[shape.label]


# product → [(profile, SM, CE, DEC, JPEG, OFA, MiB)] in shape order 1g, 1g+me, 1g double, 2g, 3g, 4g, 7g.
# devices.md §1 (A100-80 engines equal A100-40's); H200 memory from nvidia-smi (mig-parted #120); B200 see catalog.
EXPECTED: dict[str, list[tuple[str, int, int, int, int, int, int]]] = {
    "a100-sxm4-40gb": [
        ("1g.5gb", 14, 1, 0, 0, 0, 4864),
        ("1g.5gb+me", 14, 1, 1, 1, 1, 4864),
        ("1g.10gb", 14, 1, 1, 0, 0, 9856),
        ("2g.10gb", 28, 2, 1, 0, 0, 9856),
        ("3g.20gb", 42, 3, 2, 0, 0, 19968),
        ("4g.20gb", 56, 4, 2, 0, 0, 19968),
        ("7g.40gb", 98, 7, 5, 1, 1, 40192),
    ],
    "a100-sxm4-80gb": [
        ("1g.10gb", 14, 1, 0, 0, 0, 9856),
        ("1g.10gb+me", 14, 1, 1, 1, 1, 9856),
        ("1g.20gb", 14, 1, 1, 0, 0, 19968),
        ("2g.20gb", 28, 2, 1, 0, 0, 19968),
        ("3g.40gb", 42, 3, 2, 0, 0, 40192),
        ("4g.40gb", 56, 4, 2, 0, 0, 40192),
        ("7g.80gb", 98, 7, 5, 1, 1, 80384),
    ],
    "h100-sxm5-80gb": [
        ("1g.10gb", 16, 1, 1, 1, 0, 9984),
        ("1g.10gb+me", 16, 1, 1, 1, 1, 9984),
        ("1g.20gb", 26, 1, 1, 1, 0, 20096),
        ("2g.20gb", 32, 2, 2, 2, 0, 20096),
        ("3g.40gb", 60, 3, 3, 3, 0, 40448),
        ("4g.40gb", 64, 4, 4, 4, 0, 40448),
        ("7g.80gb", 132, 8, 7, 7, 1, 81152),
    ],
    "h200-sxm-141gb": [
        ("1g.18gb", 16, 1, 1, 1, 0, 16384),
        ("1g.18gb+me", 16, 1, 1, 1, 1, 16384),
        ("1g.35gb", 26, 1, 1, 1, 0, 33024),
        ("2g.35gb", 32, 2, 2, 2, 0, 33024),
        ("3g.71gb", 60, 3, 3, 3, 0, 71168),
        ("4g.71gb", 64, 4, 4, 4, 0, 71168),
        ("7g.141gb", 132, 8, 7, 7, 1, 143104),
    ],
    "b200-180gb": [
        ("1g.23gb", 18, 2, 1, 1, 0, 20992),
        ("1g.23gb+me", 18, 2, 1, 1, 1, 20992),
        ("1g.45gb", 30, 2, 1, 1, 0, 45312),
        ("2g.45gb", 36, 4, 2, 2, 0, 45312),
        ("3g.90gb", 70, 6, 3, 3, 0, 91136),
        ("4g.90gb", 72, 8, 4, 4, 0, 91136),
        ("7g.180gb", 148, 16, 7, 7, 1, 182784),
    ],
}
EXPECTED["h200-nvl-141gb"] = EXPECTED["h200-sxm-141gb"]

ROWS = [(key, row) for key, rows in EXPECTED.items() for row in rows]


@pytest.mark.parametrize(("product_key", "row"), ROWS, ids=[f"{k}-{r[0]}" for k, r in ROWS])
def test_profile_engines_and_memory(product_key: str, row: tuple[str, int, int, int, int, int, int]) -> None:
    name, sm, ce, dec, jpeg, ofa, mib = row
    profile = catalog.GPU_PRODUCTS[product_key].mig_profile(name)
    assert profile is not None
    e = profile.engines
    assert (e.multiprocessors, e.copy_engines, e.decoders, e.jpeg_engines, e.ofa_engines, profile.memory_mib) == (
        sm,
        ce,
        dec,
        jpeg,
        ofa,
        mib,
    )
    assert e.encoders == 0  # no NVENC on any of these datacenter parts


@pytest.mark.parametrize("product_key", EXPECTED, ids=list(EXPECTED))
def test_profiles_follow_the_shape_order(product_key: str) -> None:
    product = catalog.GPU_PRODUCTS[product_key]
    assert [p.shape for p in product.mig_profiles] == list(mig.SHAPES)
    assert [p.name for p in product.mig_profiles] == [r[0] for r in EXPECTED[product_key]]


# (PCI device ID, architecture, compute capability, MiB) — devices.md §1 (A100-80's total from nvidia-smi).
IDENTITY = {
    "a100-sxm4-40gb": (0x20B0, "Ampere", "8.0", 40960),
    "a100-sxm4-80gb": (0x20B2, "Ampere", "8.0", 81920),
    "h100-sxm5-80gb": (0x2330, "Hopper", "9.0", 81559),
    "h200-sxm-141gb": (0x2335, "Hopper", "9.0", 143771),
    "h200-nvl-141gb": (0x233B, "Hopper", "9.0", 143771),
    "b200-180gb": (0x2901, "Blackwell", "10.0", 183359),
}


@pytest.mark.parametrize("product_key", IDENTITY, ids=list(IDENTITY))
def test_product_identity(product_key: str) -> None:
    product = catalog.GPU_PRODUCTS[product_key]
    assert (product.ids.device, product.architecture, product.compute_capability, product.memory_mib) == (
        IDENTITY[product_key]
    )
    assert product.ids.vendor == 0x10DE and product.ids.class_code == 0x030200


@pytest.mark.parametrize("product_key", IDENTITY, ids=list(IDENTITY))
def test_only_ampere_needs_a_reset_to_toggle_mig(product_key: str) -> None:
    assert catalog.GPU_PRODUCTS[product_key].mig_needs_reset is (product_key.startswith("a100"))


def _fill(product: GpuProduct, profile: mig.MigProfile) -> list[LayoutInstance]:
    return [LayoutInstance(profile=profile, start=s) for s in profile.shape.starts[: profile.shape.max_per_gpu]]


PROFILES = [(p, prof) for p in catalog.GPU_PRODUCTS.values() for prof in p.mig_profiles]


@pytest.mark.parametrize(("product", "profile"), PROFILES, ids=[f"{p.key}-{q.name}" for p, q in PROFILES])
def test_the_maximum_count_of_each_profile_fits_the_gpu(product: GpuProduct, profile: mig.MigProfile) -> None:
    layout = _fill(product, profile)
    assert check_layout(layout, full=product.full_engines) == []
    # ...and within the full GPU's counters, so the scheduler can really place that many.
    full = product.full_engines
    assert sum(i.profile.engines.multiprocessors for i in layout) <= full.multiprocessors
    assert sum(i.profile.engines.copy_engines for i in layout) <= full.copy_engines
    assert sum(i.profile.engines.decoders for i in layout) <= full.decoders
    assert sum(i.profile.engines.jpeg_engines for i in layout) <= full.jpeg_engines
    assert sum(i.profile.engines.ofa_engines for i in layout) <= full.ofa_engines
    assert sum(i.profile.memory_mib for i in layout) <= product.memory_mib


@pytest.mark.parametrize("product", catalog.GPU_PRODUCTS.values(), ids=list(catalog.GPU_PRODUCTS))
def test_every_gpu_has_25_placements(product: GpuProduct) -> None:
    assert sum(len(p.placements()) for p in product.mig_profiles) == 7 + 7 + 4 + 3 + 2 + 1 + 1


H100 = catalog.H100_SXM


def _layout(*pairs: tuple[str, int]) -> list[LayoutInstance]:
    out = []
    for name, start in pairs:
        profile = H100.mig_profile(name)
        assert profile is not None
        out.append(LayoutInstance(profile=profile, start=start))
    return out


@pytest.mark.parametrize(
    ("pairs", "bad_index", "rule"),
    [
        ((("3g.40gb", 2),), 0, "cannot start at memory slice 2"),
        ((("4g.40gb", 0), ("3g.40gb", 0)), 1, "overlaps 4g.40gb@0"),
        ((("2g.20gb", 2), ("1g.20gb", 2)), 1, "overlaps 2g.20gb@2"),
        ((("1g.10gb+me", 0), ("1g.10gb+me", 1)), 1, "at most 1 × 1g.10gb+me"),
        ((("7g.80gb", 0), ("1g.10gb", 0)), 1, "overlaps 7g.80gb@0"),
    ],
    ids=["invalid-start", "overlap-4g-3g", "overlap-2g-1g-double", "two-media-extensions", "beside-7g"],
)
def test_check_layout_names_the_broken_rule(pairs: tuple[tuple[str, int], ...], bad_index: int, rule: str) -> None:
    problems = check_layout(_layout(*pairs), full=H100.full_engines)
    assert problems and problems[0].index == bad_index and rule in problems[0].rule


def test_a_full_valid_layout_passes() -> None:
    layout = _layout(("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))
    assert check_layout(layout, full=H100.full_engines) == []


def test_placement_overlap_is_symmetric_and_exclusive_of_neighbours() -> None:
    a, b = mig.Placement(start=0, size=4), mig.Placement(start=4, size=4)
    assert not a.overlaps(b) and not b.overlaps(a)
    assert a.overlaps(mig.Placement(start=2, size=2)) and mig.Placement(start=2, size=2).overlaps(a)


# vGPU type names — devices.md §3.
VGPU_NAMES = {
    "h100-sxm5-80gb": [
        "H100XM-1-10C",
        "H100XM-1-10CME",
        "H100XM-1-20C",
        "H100XM-2-20C",
        "H100XM-3-40C",
        "H100XM-4-40C",
        "H100XM-7-80C",
        "H100XM-80C",
        "H100XM-40C",
        "H100XM-20C",
        "H100XM-16C",
        "H100XM-10C",
        "H100XM-8C",
        "H100XM-5C",
        "H100XM-4C",
    ],
    "h200-sxm-141gb": [
        "H200X-1-18C",
        "H200X-1-18CME",
        "H200X-1-35C",
        "H200X-2-35C",
        "H200X-3-71C",
        "H200X-4-71C",
        "H200X-7-141C",
        "H200X-141C",
        "H200X-70C",
        "H200X-35C",
        "H200X-28C",
        "H200X-17C",
        "H200X-14C",
        "H200X-8C",
        "H200X-7C",
        "H200X-4C",
    ],
}


@pytest.mark.parametrize("product_key", VGPU_NAMES, ids=list(VGPU_NAMES))
def test_vgpu_type_names(product_key: str) -> None:
    assert [t.name for t in catalog.GPU_PRODUCTS[product_key].vgpu_types] == VGPU_NAMES[product_key]


def test_h100_time_sliced_densities() -> None:
    dense = {t.name: t.max_per_gpu for t in H100.vgpu_types if not t.mig_backed}
    assert dense == {
        "H100XM-80C": 1,
        "H100XM-40C": 2,
        "H100XM-20C": 4,
        "H100XM-16C": 5,
        "H100XM-10C": 8,
        "H100XM-8C": 10,
        "H100XM-5C": 16,
        "H100XM-4C": 20,
    }
    # No time-sliced type oversubscribes the framebuffer.
    assert all(t.framebuffer_mib * t.max_per_gpu <= 80 * 1024 for t in H100.vgpu_types if not t.mig_backed)


def test_mig_backed_vgpu_follows_its_profile() -> None:
    t = H100.vgpu_type("H100XM-3-40C")
    assert t is not None and t.mig_profile == "3g.40gb" and t.max_per_gpu == 2 and t.framebuffer_mib == 40448
