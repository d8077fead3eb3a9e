"""Version strings and torch build kinds, read the same way from a live torch, a snapshot or a lock file.

Example:
    >>> from torchwork.env.versions import build_from_version, major_minor
    >>> build_from_version("1.13.1+cu117"), build_from_version("2.0.0+cpu"), build_from_version("2.3.0+rocm6.0")
    ('cuda 11.7', 'cpu', 'rocm 6.0')
    >>> major_minor("2.13.0+cpu"), major_minor("3.10.12")
    ((2, 13), (3, 10))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_NUMBERS = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?")
MAX_PART_DIGITS = 18  # a version number's part; longer ones are not versions (and int() of 4300+ digits raises)


def canonical_name(name: str) -> str:
    """A distribution name as pip compares them: lower case, runs of ``-_.`` as one ``-`` (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def major_minor(version: str | None) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string, or None when it does not start with a number."""
    match = _NUMBERS.match(version) if isinstance(version, str) else None
    if not match or any(len(part or "") > MAX_PART_DIGITS for part in match.groups()):
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def major(version: str | None) -> int | None:
    found = major_minor(version)
    return found[0] if found else None


def build_from_version(torch_version: str | None, packages: Mapping[str, str] | None = None) -> str | None:
    """The build kind (``cpu``, ``cuda X.Y``, ``rocm X.Y``) from torch's version and, without a local tag,
    from the NVIDIA runtime wheels beside it (PyPI's Linux torch is a CUDA build with no ``+cuXY`` tag).

    None when nothing tells (an untagged torch with no NVIDIA wheels listed).
    """
    local = (torch_version if isinstance(torch_version, str) else "").partition("+")[2].lower()
    if local.startswith("cpu"):
        return "cpu"
    cuda = re.match(r"cu(\d{1,4})(\d)$", local)
    if cuda:
        return f"cuda {int(cuda.group(1))}.{cuda.group(2)}"
    rocm = re.match(r"rocm(\d{1,4})\.(\d{1,4})", local)
    if rocm:
        return f"rocm {rocm.group(1)}.{rocm.group(2)}"
    for name, version in (packages or {}).items():
        if re.match(r"nvidia-cuda-runtime-cu\d+$", canonical_name(name)):
            found = major_minor(version)
            return f"cuda {found[0]}.{found[1]}" if found else "cuda"
    return None


def build_of_torch(torch: Any) -> str:
    """The build kind of an imported torch: ``cpu``, ``cuda X.Y`` or ``rocm X.Y``."""
    if getattr(torch.version, "hip", None):
        found = major_minor(torch.version.hip)
        return f"rocm {found[0]}.{found[1]}" if found else "rocm"
    if torch.version.cuda:
        return f"cuda {torch.version.cuda}"
    return "cpu"


def build_family(build: str | None) -> str | None:
    """``cpu``, ``cuda`` or ``rocm`` (None when unknown)."""
    parts = build.split() if isinstance(build, str) else []
    return parts[0] if parts else None
