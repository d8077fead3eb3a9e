"""Findings, where they are in the user's code, and how they are shown.

A :class:`Finding` names one mistake: a stable check id, a severity, the user's ``file:line``, what
happened and what to do. :func:`user_location` walks the Python stack to the innermost frame that belongs
to the user's code (not torch, not torchwork, not the standard library, not an installed package).

Example:
    >>> from torchwork.doctor.findings import Finding, format_report
    >>> f = Finding("eval-mode", "warning", "train.py", 41, "Dropout was active during evaluation.",
    ...             "Call model.eval() before evaluating.")
    >>> print(format_report([f], script="train.py", exit_code=0).splitlines()[0])
    torchwork doctor: 1 finding in train.py (1 warning; the script exited with 0)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig
import types
from collections.abc import Iterable
from typing import Any

from torchwork.locations import display_path, format_where  # noqa: F401  (re-exported: the doctor's own modules use them)

SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass
class Finding:
    """One classic mistake found in the user's code.

    ``file`` and ``line`` point at the user's code (``None`` when no user frame was involved).
    """

    id: str
    severity: str
    file: str | None
    line: int | None
    message: str
    fix: str
    count: int = 1  # how many times the same id was seen at the same line

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "file": self.file, "line": self.line,
                "message": self.message, "fix": self.fix}

    @property
    def where(self) -> str:
        if self.file is None:
            return "(no user code involved)"
        return f"{self.file}:{self.line}" if self.line is not None else self.file


# ---------------------------------------------------------------------------------------------- locator
def _library_roots() -> tuple[str, ...]:
    roots = set()
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.add(os.path.realpath(paths[key]))
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        roots.add(os.path.realpath(os.path.join(prefix, "lib")))
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the torchwork package
    roots.add(here)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        roots.add(os.path.dirname(os.path.realpath(torch_file)))
    return tuple(sorted(root.rstrip(os.sep) + os.sep for root in roots))


class Locator:
    """Decides which source files are the user's and finds the user's innermost frame.

    A file is library code when it lies under the interpreter's library folders, site-packages,
    torch or torchwork, in a folder of ``sys.path`` that pip installed into (``pip install --target DIR``:
    it holds ``*.dist-info`` folders), or has no real path (``<frozen ...>``, ``<string>``).
    """

    def __init__(self, extra_library_roots: Iterable[str] = ()) -> None:
        self._roots = _library_roots() + tuple(os.path.realpath(r) + os.sep for r in extra_library_roots)
        self._cache: dict[str, bool] = {}
        self._install_targets: dict[str, tuple[str, bool]] = {}  # sys.path entry -> (its real path, pip's?)
        self._user_files: set[str] = set()
        self._user_roots: tuple[str, ...] = ()
        self._torch_cache: dict[str, bool] = {}
        self._torch_roots = tuple(r for r in self._roots if r.rstrip(os.sep).endswith(("torch", "torchwork")))

    def count_as_user(self, path: str | os.PathLike[str]) -> None:
        """Count the file ``path``, or every file under the folder ``path``, as the user's wherever it lies:
        the script ``torchwork doctor`` runs, even one shipped inside an installed package
        (``litgpt/finetune/lora.py``), or a library of the user's own installed into site-packages
        (``torchwork doctor --user-code``) is the code being diagnosed."""
        real = os.path.realpath(path)
        if os.path.isdir(real):
            self._user_roots += (real.rstrip(os.sep) + os.sep,)
        else:
            self._user_files.add(real)
        self._cache.clear()

    def is_user_file(self, filename: str) -> bool:
        known = self._cache.get(filename)
        if known is not None:
            return known
        if filename.startswith("<") or not filename:
            user = filename == "<stdin>"
        else:
            real = os.path.realpath(filename)
            library = (real.startswith(self._roots) or "site-packages" in real or "dist-packages" in real
                       or self._in_install_target(real))
            user = real in self._user_files or real.startswith(self._user_roots) or not library
        self._cache[filename] = user
        return user

    def _in_install_target(self, real: str) -> bool:
        """Whether ``real`` lies under a ``sys.path`` folder holding installed distributions' metadata.

        Only ``*.dist-info``: a project installed with ``pip install -e`` by setuptools keeps its
        ``*.egg-info`` beside its own sources, which stay the user's.
        """
        for entry in sys.path:
            # a relative entry ('' is the working folder) is another folder after the script's os.chdir
            entry = entry if os.path.isabs(entry) else os.path.abspath(entry or os.curdir)
            known = self._install_targets.get(entry)
            if known is None:
                folder = os.path.realpath(entry)
                try:
                    target = any(name.endswith(".dist-info") for name in os.listdir(folder))
                except OSError:
                    target = False
                known = self._install_targets[entry] = (folder.rstrip(os.sep) + os.sep, target)
            prefix, target = known
            if target and real.startswith(prefix):
                return True
        return False

    def from_frame(self, frame: types.FrameType | None) -> tuple[str, int] | None:
        """The innermost user frame at or above ``frame``, as (filename, line)."""
        cache = self._cache
        while frame is not None:
            filename = frame.f_code.co_filename
            user = cache.get(filename)
            if user is None:
                user = self.is_user_file(filename)
            if user:
                return filename, frame.f_lineno
            frame = frame.f_back
        return None

    def here(self, skip: int = 1) -> tuple[str, int] | None:
        """The innermost user frame of the current stack (``skip`` frames above the caller)."""
        try:
            frame: types.FrameType | None = sys._getframe(skip + 1)
        except ValueError:
            return None
        return self.from_frame(frame)

    def from_traceback(self, tb: types.TracebackType | None) -> tuple[str, int] | None:
        """The innermost user frame of a traceback (where the user's code called into the failure)."""
        found = None
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if self.is_user_file(filename):
                found = (filename, tb.tb_lineno)
            tb = tb.tb_next
        return found

    def caller_is_user(self, skip: int = 1) -> bool:
        """True when the first frame outside torch/torchwork above the caller is user code.

        Used to tell an in-place op the user wrote from one that a library performs on its own.
        """
        try:
            frame: types.FrameType | None = sys._getframe(skip + 1)
        except ValueError:
            return False
        while frame is not None:
            filename = frame.f_code.co_filename
            in_torch = self._torch_cache.get(filename)
            if in_torch is None:
                in_torch = self._torch_cache[filename] = os.path.realpath(filename).startswith(self._torch_roots)
            if not in_torch:
                return self.is_user_file(filename)
            frame = frame.f_back
        return False


# ---------------------------------------------------------------------------------------------- report
def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order.get(f.severity, 9), f.id, f.file or "", f.line or 0))


def exit_code_for(findings: Iterable[Finding]) -> int:
    """0 when no finding is an error or a warning, else 1."""
    return 1 if any(f.severity in ("error", "warning") for f in findings) else 0


def format_report(findings: Iterable[Finding], script: str, exit_code: int | None) -> str:
    """Readable report: findings grouped by severity, each with file:line, evidence and fix."""
    findings = sort_findings(findings)
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
    ran = f"the script exited with {exit_code}" if exit_code is not None else "the script did not finish"
    noun = "finding" if len(findings) == 1 else "findings"
    if not findings:
        return f"torchwork doctor: no findings in {script} ({ran})."
    lines = [f"torchwork doctor: {len(findings)} {noun} in {script} ({summary}; {ran})"]
    for severity in SEVERITIES:
        group = [f for f in findings if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{severity.upper()}S" if len(group) > 1 else severity.upper())
        for f in group:
            times = f" (x{f.count})" if f.count > 1 else ""
            if severity == "info":  # a note, not a problem: one line
                lines.append(f"  [{f.id}] {f.where}{times}: {' '.join(f.message.split())} {f.fix}")
                continue
            lines.append(f"  [{f.id}] {f.where}{times}")
            for text in f.message.splitlines():
                lines.append(f"      {text}")
            lines.append(f"      fix: {f.fix}")
    return "\n".join(lines)
