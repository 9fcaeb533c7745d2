"""Resolving CDI device IDs across specs: later directories win, equal-priority duplicates conflict."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdi import (
    ContainerEdits,
    Device,
    DeviceConflictError,
    LoadedSpec,
    Registry,
    ResolveError,
    ScanResult,
    Spec,
    SpecReadError,
    build_registry,
)


def loaded(*, path: str, priority: int, devices: dict[str, str], kind: str = "fake.example.com/gpu") -> LoadedSpec:
    """A spec at ``path`` whose devices each set FAKE=<value>, so tests can tell which file won."""
    spec = Spec(
        version="0.5.0",
        kind=kind,
        devices=tuple(
            Device(name=name, container_edits=ContainerEdits(env=(f"FAKE={value}",))) for name, value in devices.items()
        ),
    )
    return LoadedSpec(spec=spec, path=Path(path), priority=priority)


def registry_of(*specs: LoadedSpec) -> Registry:
    return build_registry(scan=ScanResult(specs=specs, errors=()))


def env_of(registry: Registry, device_id: str) -> tuple[str, ...]:
    return registry.resolve(device_id).device.container_edits.env


def test_resolves_a_device_to_its_spec_and_file() -> None:
    registry = registry_of(loaded(path="/etc/cdi/a.json", priority=0, devices={"gpu0": "a"}))

    resolved = registry.resolve("fake.example.com/gpu=gpu0")

    assert (resolved.device.name, resolved.source.path, resolved.source.spec.kind) == (
        "gpu0",
        Path("/etc/cdi/a.json"),
        "fake.example.com/gpu",
    )


def test_device_ids_lists_every_resolvable_device_sorted() -> None:
    registry = registry_of(
        loaded(path="/a/x.json", priority=0, devices={"gpu1": "x", "gpu0": "x"}),
        loaded(path="/a/y.json", priority=0, devices={"nic0": "y"}, kind="fake.example.com/nic"),
    )

    assert registry.device_ids() == (
        "fake.example.com/gpu=gpu0",
        "fake.example.com/gpu=gpu1",
        "fake.example.com/nic=nic0",
    )


def test_a_later_directory_overrides_an_earlier_one() -> None:
    registry = registry_of(
        loaded(path="/etc/cdi/a.json", priority=0, devices={"gpu0": "static"}),
        loaded(path="/var/run/cdi/b.json", priority=1, devices={"gpu0": "dynamic"}),
    )

    assert env_of(registry, "fake.example.com/gpu=gpu0") == ("FAKE=dynamic",)
    assert registry.errors == ()


def test_an_earlier_directory_never_overrides_a_later_one() -> None:
    registry = registry_of(
        loaded(path="/var/run/cdi/b.json", priority=1, devices={"gpu0": "dynamic"}),
        loaded(path="/etc/cdi/a.json", priority=0, devices={"gpu0": "static"}),
    )

    assert env_of(registry, "fake.example.com/gpu=gpu0") == ("FAKE=dynamic",)


def test_equal_priority_duplicates_are_reported_and_unresolvable() -> None:
    registry = registry_of(
        loaded(path="/cdi/a.json", priority=0, devices={"gpu0": "a", "gpu1": "a"}),
        loaded(path="/cdi/b.json", priority=0, devices={"gpu0": "b"}),
    )

    assert [(type(e), e.device_id, e.paths) for e in registry.errors if isinstance(e, DeviceConflictError)] == [
        (DeviceConflictError, "fake.example.com/gpu=gpu0", (Path("/cdi/a.json"), Path("/cdi/b.json")))
    ]
    assert registry.device_ids() == ("fake.example.com/gpu=gpu1",)
    with pytest.raises(ResolveError, match="equal priority"):
        registry.resolve("fake.example.com/gpu=gpu0")


def test_a_conflict_stays_unresolvable_even_if_a_later_directory_defines_it() -> None:
    # The reference drops every conflicting name after the scan, whatever a higher-priority dir says.
    registry = registry_of(
        loaded(path="/etc/cdi/a.json", priority=0, devices={"gpu0": "a"}),
        loaded(path="/etc/cdi/b.json", priority=0, devices={"gpu0": "b"}),
        loaded(path="/var/run/cdi/c.json", priority=1, devices={"gpu0": "c"}),
    )

    assert "fake.example.com/gpu=gpu0" not in registry.device_ids()


def test_resolve_all_keeps_request_order() -> None:
    registry = registry_of(loaded(path="/a.json", priority=0, devices={"gpu0": "0", "gpu1": "1"}))

    resolved = registry.resolve_all(["fake.example.com/gpu=gpu1", "fake.example.com/gpu=gpu0"])

    assert [r.device.name for r in resolved] == ["gpu1", "gpu0"]


def test_resolve_all_names_every_unresolvable_id_and_why() -> None:
    registry = registry_of(loaded(path="/a.json", priority=0, devices={"gpu0": "0"}))

    with pytest.raises(ResolveError) as caught:
        registry.resolve_all(["fake.example.com/gpu=gpu9", "fake.example.com/gpu=gpu0", "/dev/nvidia0"])

    assert caught.value.unresolved == ("fake.example.com/gpu=gpu9", "/dev/nvidia0")
    assert "fake.example.com/gpu=gpu9: no spec in the CDI directories defines it" in str(caught.value)
    assert "not a qualified CDI device ID" in str(caught.value)


def test_scan_errors_are_carried_into_the_registry() -> None:
    error = SpecReadError("cannot read CDI directory /etc/cdi: Permission denied", path=Path("/etc/cdi"))
    registry = build_registry(scan=ScanResult(specs=(), errors=(error,)))

    assert registry.errors == (error,)
