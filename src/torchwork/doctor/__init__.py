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

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_package

# Type checkers read the imports (and flag a misspelt name); at run time each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.doctor.checks import CHECK_IDS  # noqa: F401
    from torchwork.doctor.explain import FAMILIES, explain_exception, explain_text  # noqa: F401
    from torchwork.doctor.findings import Finding  # noqa: F401
    from torchwork.doctor.guard import DoctorWarning, Guard, attach_guard  # noqa: F401
    from torchwork.doctor.runner import DoctorResult, run_script  # noqa: F401
    from torchwork.doctor.session import Session, diagnose  # noqa: F401

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
