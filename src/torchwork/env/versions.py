"""Version strings and torch build kinds, read the same way from a live torch, a snapshot or a lock file.

Example:
    >>> from torchwork.env.versions import build_from_version, major_minor
    >>> build_from_version("1.13.1+cu117"), build_from_version("2.0.0+cpu"), build_from_version("2.3.0+rocm6.0")
    ('cuda 11.7', 'cpu', 'rocm 6.0')
    >>> major_minor("2.13.0+cpu"), major_minor("3.10.12")
    ((2, 13), (3, 10))
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_NUMBERS = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?")
MAX_PART_DIGITS = 18  # a version number's part; longer ones are not versions (and int() of 4300+ digits raises)
VERSION_FILE_MAX_BYTES = 64 * 1024  # torch/version.py: 300 bytes in 2.13


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
    """The build kind of an imported torch (or of its ``torch.version``, or of :func:`torch_version_facts`):
    ``cpu``, ``cuda X.Y`` or ``rocm X.Y``."""
    version = getattr(torch, "version", torch)
    if getattr(version, "hip", None):
        found = major_minor(version.hip)
        return f"rocm {found[0]}.{found[1]}" if found else "rocm"
    if getattr(version, "cuda", None):
        return f"cuda {version.cuda}"
    return "cpu"


def torch_version_facts() -> Any:
    """torch's ``__version__``, ``cuda`` and ``hip`` (as ``torch.version`` has them) without importing torch:
    read as data from the ``torch/version.py`` the wheel ships (:func:`read_torch_version_file`; a torch
    already imported is asked instead, and a file that does not read so falls back to importing it). A
    server of an ONNX artifact thus never loads torch's 220 MB to name its version. None when torch is not
    installed.

    Example:
        >>> facts = torch_version_facts()  # before torch is imported: read from its version.py
        >>> import torch
        >>> facts.__version__ == torch.__version__, build_of_torch(facts) == build_of_torch(torch)
        (True, True)
    """
    if "torch" in sys.modules:
        return sys.modules["torch"].version
    spec = importlib.util.find_spec("torch")  # finds the package, does not import it
    if spec is None or not spec.origin:
        return None
    facts = read_torch_version_file(Path(spec.origin).parent / "version.py")
    if facts is None:
        import torch

        return torch.version
    return facts


def read_torch_version_file(path: Path) -> Any:
    """``__version__``, ``cuda`` and ``hip`` of a ``torch/version.py``, parsed, never run (literal values
    only); None when the file does not read so or names no version.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "version.py"
        >>> _ = path.write_text("__version__ = '2.4.1+cu121'\\ncuda = '12.1'\\n")
        >>> facts = read_torch_version_file(path)
        >>> facts.__version__, build_of_torch(facts)
        ('2.4.1+cu121', 'cuda 12.1')
    """
    found: dict[str, Any] = {"cuda": None, "hip": None}
    try:
        if not path.is_file():  # a regular file (torch's is a few hundred bytes), never a FIFO or a device
            return None
        with path.open("rb") as handle:
            raw = handle.read(VERSION_FILE_MAX_BYTES + 1)
        if len(raw) > VERSION_FILE_MAX_BYTES:
            return None
        for node in ast.parse(raw.decode("utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
                node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and target.id in ("__version__", "cuda", "hip") and value is not None:
                found[target.id] = ast.literal_eval(value)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(found.get("__version__"), str):
        return None
    return SimpleNamespace(**found)


def build_family(build: str | None) -> str | None:
    """``cpu``, ``cuda`` or ``rocm`` (None when unknown)."""
    parts = build.split() if isinstance(build, str) else []
    return parts[0] if parts else None
