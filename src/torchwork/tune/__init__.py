"""Tuning on Optuna: ``torchwork tune RECIPE --space SPACE.yaml --trials N``, crash-safe, parallel, pruned
and reproducible. See docs/tune.md.

Example:
    >>> from torchwork.tune import TuneOptions
    >>> TuneOptions("sentiment", "space.yaml", trials=16).pruner
    'percentile'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_attributes

_LAZY: dict[str, str] = {
    "tune": "torchwork.tune.runner",
    "tune_objective": "torchwork.tune.runner",
    "TrialSetup": "torchwork.tune.objective",
    "TuneOptions": "torchwork.tune.runner",
    "Space": "torchwork.tune.space",
    "read_space": "torchwork.tune.space",
    "PruningCallback": "torchwork.tune.pruning",
    "show": "torchwork.tune.show",
}

__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.tune.objective import TrialSetup  # noqa: F401
    from torchwork.tune.pruning import PruningCallback  # noqa: F401
    from torchwork.tune.runner import TuneOptions, tune, tune_objective  # noqa: F401
    from torchwork.tune.show import show  # noqa: F401
    from torchwork.tune.space import Space, read_space  # noqa: F401
else:
    __getattr__, __dir__ = lazy_attributes("torchwork.tune", _LAZY, globals())
