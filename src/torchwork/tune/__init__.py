"""Tuning on Optuna: ``torchwork tune RECIPE --space SPACE.yaml --trials N``, crash-safe, parallel, pruned
and reproducible. See docs/tune.md.

Example:
    >>> from torchwork.tune import TuneOptions
    >>> TuneOptions("sentiment", "space.yaml", trials=16).pruner
    'percentile'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_package

# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.lazy_package reads them back and each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.tune.objective import TrialSetup  # noqa: F401
    from torchwork.tune.pruning import PruningCallback  # noqa: F401
    from torchwork.tune.runner import TuneOptions, tune, tune_objective  # noqa: F401
    from torchwork.tune.show import show  # noqa: F401
    from torchwork.tune.space import Space, read_space  # noqa: F401

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
