"""Loading node profiles: built-in ones shipped in ``fakedev/model/profiles/`` by name, or any YAML file by path.

This is the only module that reads profile files; parsing and validation live in :mod:`fakedev.model.profile`.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Final

from fakedev.errors import ProfileError
from fakedev.model.profile import NodeProfile, parse_profile
from yamlsafe import DEFAULT_LIMITS

_PACKAGE: Final = "fakedev.model.profiles"
_SUFFIX: Final = ".yaml"


def builtin_profile_names() -> list[str]:
    """Names of the profiles shipped with fakedev, sorted."""
    root = resources.files(_PACKAGE)
    return sorted(p.name.removesuffix(_SUFFIX) for p in root.iterdir() if p.name.endswith(_SUFFIX))


def load_profile(name_or_path: str | Path) -> NodeProfile:
    """A built-in profile by name (``dgx-h100``) or a profile file by path (anything with a ``/`` or ``.yaml``)."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or text.endswith((_SUFFIX, ".yml")):
        path = Path(name_or_path)
        try:
            # One byte past the limit is enough for the reader to refuse a file that is too large.
            with path.open("rb") as file:
                content = file.read(DEFAULT_LIMITS.max_bytes + 1)
        except OSError as exc:
            raise ProfileError(f"{path}: <file>: cannot read the profile: {exc.strerror or exc}") from exc
        return parse_profile(content, source=str(path))
    if text not in builtin_profile_names():
        raise ProfileError(
            f"{text}: <name>: no built-in profile of that name "
            f"(built-in: {', '.join(builtin_profile_names())}; or give a path to a YAML file)"
        )
    return _builtin_profile(text)


@functools.cache
def _builtin_profile(name: str) -> NodeProfile:
    """Parsed once per process: a fleet of emulated nodes would otherwise parse the same YAML per node."""
    resource = resources.files(_PACKAGE) / f"{name}{_SUFFIX}"
    return parse_profile(resource.read_bytes(), source=f"{name}{_SUFFIX}")
