"""The Container Device Interface: spec model, naming, validation, atomic writer, registry and OCI injector.

A leaf package (stdlib and PyYAML only). Producers build a :class:`Spec`, set its version with
:func:`with_minimum_version`, render device IDs with :func:`render_qualified_name` and call :func:`write_spec`.
Consumers (the node emulator, as a runtime) call :func:`load_registry` and :func:`inject_devices`.
"""

from cdi.errors import (
    CdiError,
    DeviceConflictError,
    InjectError,
    PathEscapeError,
    QualifiedNameError,
    ResolveError,
    SpecError,
    SpecProblem,
    SpecReadError,
    WriteError,
)
from cdi.hostdev import HostDevice, StatDevice, stat_host_device
from cdi.inject import OciSpec, apply_edits, compute_edit_order, inject_devices
from cdi.loader import LoadedSpec, ScanResult, SpecFormat, load_spec_file, parse_spec_text, scan_spec_dirs
from cdi.naming import (
    Kind,
    QualifiedName,
    parse_kind,
    parse_qualified_name,
    render_kind,
    render_qualified_name,
    validate_class_name,
    validate_device_name,
    validate_kind,
    validate_vendor_name,
)
from cdi.registry import Registry, ResolvedDevice, build_registry, load_registry
from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdi.validate import find_spec_problems, validate_spec
from cdi.version import (
    KNOWN_VERSIONS,
    VERSION_RULES,
    WRITABLE_VERSIONS,
    compute_minimum_version,
    compute_required_version,
    with_minimum_version,
)
from cdi.writer import (
    remove_spec,
    remove_specs_with_prefix,
    remove_temp_files,
    render_spec_text,
    sync_dir,
    write_spec,
)

__all__ = [
    "KNOWN_VERSIONS",
    "VERSION_RULES",
    "WRITABLE_VERSIONS",
    "CdiError",
    "ContainerEdits",
    "Device",
    "DeviceConflictError",
    "DeviceNode",
    "Hook",
    "HostDevice",
    "InjectError",
    "IntelRdt",
    "Kind",
    "LoadedSpec",
    "Mount",
    "NetDevice",
    "OciSpec",
    "PathEscapeError",
    "QualifiedName",
    "QualifiedNameError",
    "Registry",
    "ResolveError",
    "ResolvedDevice",
    "ScanResult",
    "Spec",
    "SpecError",
    "SpecFormat",
    "SpecProblem",
    "SpecReadError",
    "StatDevice",
    "WriteError",
    "apply_edits",
    "build_registry",
    "compute_edit_order",
    "compute_minimum_version",
    "compute_required_version",
    "find_spec_problems",
    "inject_devices",
    "load_registry",
    "load_spec_file",
    "parse_kind",
    "parse_qualified_name",
    "parse_spec_text",
    "remove_spec",
    "remove_specs_with_prefix",
    "remove_temp_files",
    "render_kind",
    "render_qualified_name",
    "render_spec_text",
    "scan_spec_dirs",
    "stat_host_device",
    "sync_dir",
    "validate_class_name",
    "validate_device_name",
    "validate_kind",
    "validate_spec",
    "validate_vendor_name",
    "with_minimum_version",
    "write_spec",
]
