"""The environment doctor: what this machine is, whether it computes correctly, and how it differs.

``torchwork env`` reports (and ``--json`` snapshots) Python, OS / CPU, torch's build, CUDA, GPUs, threads,
every OpenMP and BLAS library in the process with the package that ships it, and the variables that change
behaviour, with findings. ``env check`` runs known-answer tests (and replays an artifact's recorded
inputs); ``env lock`` pins every distribution; ``env diff A B`` ranks the differences between two
snapshots, lock files, run folders or artifacts. Names are imported lazily.

Example:
    >>> from torchwork.env import compact_snapshot
    >>> sorted(compact_snapshot())[:3]
    ['build', 'cuda', 'cudnn']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_package

# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.lazy_package reads them back and each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.env.diff import diff_profiles  # noqa: F401
    from torchwork.env.drift import warn_if_machine_differs  # noqa: F401
    from torchwork.env.known_answers import run_checks  # noqa: F401
    from torchwork.env.libraries import runtime_libraries  # noqa: F401
    from torchwork.env.lock import lock_text  # noqa: F401
    from torchwork.env.report import compact_snapshot, format_report, snapshot  # noqa: F401
    from torchwork.env.sources import load_profile  # noqa: F401

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
