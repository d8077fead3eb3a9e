"""The sentiment recipe's transformer settings: the fields of a SentimentConfig its transformer reads, typed.

:meth:`TransformerSettings.of` reads them once from the config; the transformer's steps take this object,
not the whole config. The names are the config's (``--set transformer_lr=...`` is ``settings.transformer_lr``).

Example:
    >>> from torchwork.recipes.sentiment import SentimentConfig
    >>> settings = TransformerSettings.of(SentimentConfig(transformer_epochs=2))
    >>> settings.transformer_epochs, settings.recorded["transformer_epochs"]
    (2, 2)
    >>> validate_settings(TransformerSettings.of(SentimentConfig(layer_decay=1.5)))
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: layer_decay=1.5: use a number in (0, 1].
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.recipes.sentiment import SentimentConfig


@dataclasses.dataclass(frozen=True)
class TransformerSettings:
    """What the transformer part of the sentiment recipe reads of its config (see SentimentConfig's comments)."""

    seed: int
    device: str
    threads: int
    compile: str
    precision: str  # the n-gram model's, which transformer_precision="auto" follows when it is set
    transformer_precision: str
    transformer_strategy: str
    transformer_train_layers: int
    transformer_epochs: int
    transformer_batch_size: int
    transformer_lr: float
    layer_decay: float
    warmup: float
    clip_grad_norm: float
    transformer_patience: int
    transformer_max_length: int
    transformer_train_rows: int
    quantize: bool
    int8_smoothing: float
    int8_fallback_agreement: float
    model_dir: str  # a local encoder folder (torchwork fit --model DIR); empty: MiniLM
    # the whole config, as the transformer's run folder records it (a resumed run is compared with it)
    recorded: dict[str, Any]

    @classmethod
    def of(cls, config: SentimentConfig) -> TransformerSettings:
        """The settings of ``config``, read once."""
        values = dataclasses.asdict(config)
        read = {field.name: values[field.name] for field in dataclasses.fields(cls) if field.name != "recorded"}
        return cls(**read, recorded=values)


def validate_settings(settings: TransformerSettings) -> None:
    """The upper bounds of the transformer's settings (``check_settings`` has the lower ones); a ``model_dir``
    is checked here, before any work (:func:`~torchwork.finetune.encoders.check_model_folder`)."""
    name, layers, positions = "MiniLM", 6, 512
    if settings.model_dir:
        from torchwork.finetune.encoders import check_model_folder, check_weight_shapes

        folder = check_model_folder(settings.model_dir)
        check_weight_shapes(folder)
        name, layers, positions = f"this {folder.name}", folder.layers, folder.max_positions
    problems = [text for bad, text in (
        (settings.transformer_train_layers > layers, f"transformer_train_layers={settings.transformer_train_layers}: "
                                                     f"{name} has {layers} layers; train 1 to {layers} of them"),
        (settings.layer_decay > 1, f"layer_decay={settings.layer_decay}: use a number in (0, 1]"),
        (settings.warmup >= 1, f"warmup={settings.warmup}: the warm-up is a fraction of the steps, in [0, 1)"),
        (not 0 <= settings.int8_smoothing <= 1, f"int8_smoothing={settings.int8_smoothing}: SmoothQuant's alpha, "
                                                "in (0, 1], or 0 for none"),
        (not 0 <= settings.int8_fallback_agreement <= 1,
         f"int8_fallback_agreement={settings.int8_fallback_agreement}: a share in (0, 1], or 0 for no float "
         "fallback"),
        (settings.transformer_max_length > positions, f"transformer_max_length={settings.transformer_max_length}: "
                                                      f"{name} has {positions} positions (0: chosen from the data)"),
        (not isinstance(settings.device, str) or not settings.device, f"device={settings.device!r}: use auto, "
                                                                      "cpu, cuda or cuda:N")) if bad]
    if problems:
        raise ConfigError("; ".join(problems) + ".")
