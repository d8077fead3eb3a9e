"""The doctor: catch the classic PyTorch mistakes in anyone's code.

* ``torchwork doctor SCRIPT [ARGS...]`` runs an unmodified script under PyTorch's public hooks and reports
  each mistake with the user's ``file:line``, what it costs and the fix (:func:`run_script`).
* ``torchwork explain [FILE | -]`` explains a pasted traceback (:func:`explain_text`).
* :func:`diagnose` instruments code you run yourself; :class:`Guard` is the cheap always-on subset for
  the engine's training loop.

Everything is imported lazily: importing ``torchwork.doctor`` does not import torch.

Example:
    >>> from torchwork.doctor import explain_text
    >>> explain_text("RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn")[0].check
    'broken-graph'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY: dict[str, str] = {
    "Finding": "torchwork.doctor.findings",
    "explain_text": "torchwork.doctor.explain",
    "explain_exception": "torchwork.doctor.explain",
    "FAMILIES": "torchwork.doctor.explain",
    "diagnose": "torchwork.doctor.session",
    "Session": "torchwork.doctor.session",
    "run_script": "torchwork.doctor.runner",
    "DoctorResult": "torchwork.doctor.runner",
    "CHECK_IDS": "torchwork.doctor.checks",
    "Guard": "torchwork.doctor.guard",
    "attach_guard": "torchwork.doctor.guard",
    "DoctorWarning": "torchwork.doctor.guard",
}

__all__ = ["CHECK_IDS", "FAMILIES", "DoctorResult", "DoctorWarning", "Finding", "Guard", "Session", "attach_guard",
           "diagnose", "explain_exception", "explain_text", "run_script"]

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.doctor.checks import CHECK_IDS
    from torchwork.doctor.explain import FAMILIES, explain_exception, explain_text
    from torchwork.doctor.findings import Finding
    from torchwork.doctor.guard import DoctorWarning, Guard, attach_guard
    from torchwork.doctor.runner import DoctorResult, run_script
    from torchwork.doctor.session import Session, diagnose


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchwork.doctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
