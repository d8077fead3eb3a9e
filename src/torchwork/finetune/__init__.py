"""Fine-tuning from pretrained weights: load with a report, freeze, per-layer learning rates, gradual
unfreezing, frozen-prefix feature caching, and real pretrained models (MiniLM, EfficientNet-Lite0).

Names are imported lazily: ``import torchwork.finetune`` imports neither torch nor transformers.

Example:
    >>> import torchwork.finetune as finetune
    >>> "load_pretrained" in dir(finetune)
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_attributes

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "load_pretrained": "torchwork.finetune.loading",
    "LoadReport": "torchwork.finetune.loading",
    "read_state_dict": "torchwork.finetune.sources",
    "discover_prefix": "torchwork.prefixes",
    "freeze": "torchwork.finetune.freezing",
    "unfreeze": "torchwork.finetune.freezing",
    "trainable_parameters": "torchwork.finetune.freezing",
    "keep_frozen_norms_in_eval": "torchwork.engine.trainer",
    "param_groups": "torchwork.finetune.groups",
    "ParamGroups": "torchwork.finetune.groups",
    "GradualUnfreezing": "torchwork.finetune.unfreezing",
    "cache_features": "torchwork.finetune.features",
    "CachedFeatures": "torchwork.finetune.features",
    "collate_cached": "torchwork.finetune.features",
    "minilm_folder": "torchwork.finetune.minilm",
    "load_minilm": "torchwork.finetune.minilm",
    "minilm_tokenizer": "torchwork.finetune.minilm",
    "MiniLMClassifier": "torchwork.finetune.minilm",
    "mean_pool": "torchwork.finetune.minilm",
    "efficientnet_lite0": "torchwork.finetune.efficientnet",
    "adapt_input_channels": "torchwork.finetune.efficientnet",
}

__all__ = list(_LAZY)

# Type checkers read the imports (and flag a misspelt name); at run time each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.engine.trainer import keep_frozen_norms_in_eval  # noqa: F401
    from torchwork.finetune.efficientnet import adapt_input_channels, efficientnet_lite0  # noqa: F401
    from torchwork.finetune.features import CachedFeatures, cache_features, collate_cached  # noqa: F401
    from torchwork.finetune.freezing import freeze, trainable_parameters, unfreeze  # noqa: F401
    from torchwork.finetune.groups import ParamGroups, param_groups  # noqa: F401
    from torchwork.finetune.loading import LoadReport, load_pretrained  # noqa: F401
    from torchwork.finetune.minilm import (  # noqa: F401
        MiniLMClassifier,
        load_minilm,
        mean_pool,
        minilm_folder,
        minilm_tokenizer,
    )
    from torchwork.finetune.sources import read_state_dict  # noqa: F401
    from torchwork.finetune.unfreezing import GradualUnfreezing  # noqa: F401
    from torchwork.prefixes import discover_prefix  # noqa: F401
else:
    __getattr__, __dir__ = lazy_attributes("torchwork.finetune", _LAZY, globals())
