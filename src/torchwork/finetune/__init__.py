"""Fine-tuning from pretrained weights: load with a report, freeze, per-layer learning rates, gradual
unfreezing, frozen-prefix feature caching, and real pretrained models (MiniLM, EfficientNet-Lite0, or any local
BERT, DistilBERT, RoBERTa, ELECTRA or MPNet folder).

Names are imported lazily: ``import torchwork.finetune`` imports neither torch nor transformers.

Example:
    >>> import torchwork.finetune as finetune
    >>> "load_pretrained" in dir(finetune)
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_package

# public name -> module that defines it
# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.type_checking_imports reads them back and each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.finetune.efficientnet import adapt_input_channels, efficientnet_lite0  # noqa: F401
    from torchwork.finetune.encoder_model import EncoderClassifier, EncoderTop  # noqa: F401
    from torchwork.finetune.encoders import ARCHITECTURES, EncoderFolder, check_model_folder  # noqa: F401
    from torchwork.finetune.features import CachedFeatures, cache_features, collate_cached  # noqa: F401
    from torchwork.finetune.freezing import (  # noqa: F401
        freeze,
        keep_frozen_norms_in_eval,
        trainable_parameters,
        unfreeze,
    )
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

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
