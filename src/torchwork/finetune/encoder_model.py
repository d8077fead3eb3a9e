"""A text classifier on any checked encoder folder (:mod:`torchwork.finetune.encoders`): the encoder, masked
mean pooling, dropout and a linear ``classifier`` head, split at a layer into a frozen ``bottom`` and a
trained ``top``.

The split is found from the model, not from one architecture's names: the encoder's ``embeddings`` module
(and ELECTRA's ``embeddings_project`` when its embeddings are narrower than its layers), then the model's first
``ModuleList``, whose children are the layers. A layer is called with the hidden states and the mask
transformers builds for the model (``create_bidirectional_mask``); where the layers' owner computes a
relative position bias (MPNet's ``compute_position_bias``) it is computed there and passed on.

Example (a 2-layer BERT with random weights, built from its config alone):
    >>> import json, pathlib, tempfile, torch
    >>> from safetensors.torch import save_file
    >>> from torchwork.finetune.encoders import EncoderFolder, build_encoder
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> config = {"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
    ...           "num_attention_heads": 2, "intermediate_size": 32}
    >>> _ = (folder / "config.json").write_text(json.dumps(config))
    >>> save_file(build_encoder(EncoderFolder(folder, "bert", config)).state_dict(), folder / "model.safetensors")
    >>> model = EncoderClassifier(EncoderFolder(folder, "bert", config), classes=2).eval()
    >>> ids, mask = torch.tensor([[2, 7, 9, 3]]), torch.tensor([[1, 1, 1, 0]])
    >>> torch.allclose(model.top(*model.bottom(ids, mask, layers=1), start=1), model(ids, mask), atol=1e-6)
    True
    >>> model.frozen_names(1)
    ['encoder.embeddings', 'encoder.encoder.layer.0']
"""

from __future__ import annotations

import inspect
from typing import Any

from torchwork.errors import CheckpointError, ConfigError
from torchwork.finetune.encoders import DROPPED_KEYS, EncoderFolder, build_encoder
from torchwork.finite import is_count, is_finite_number
from torchwork.quoting import quote_value


def mean_pool(hidden: Any, attention_mask: Any) -> Any:
    """The mean of ``hidden`` over the positions where ``attention_mask`` is 1 (the sentence embedding)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def _module_base() -> type:
    import torch

    return torch.nn.Module


def _layer_list(encoder: Any) -> str:
    """The name of the encoder's first ``ModuleList``: its layers, whatever the architecture calls them."""
    from torch import nn

    for name, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module):
            return name
    raise ConfigError(f"{type(encoder).__name__} has no list of layers (nn.ModuleList): it is not an encoder "
                      "torchwork can split.")


class EncoderClassifier(_module_base()):  # type: ignore[misc]
    """Encoder + masked mean pooling + dropout + a linear ``classifier`` head; ``load_report`` says what loaded.

    ``bottom(..., layers=k)`` runs the embeddings and the first ``k`` layers and returns ``(hidden,
    attention_mask)``; ``top(hidden, attention_mask, start=k)`` runs the rest; ``top(*bottom(...))`` equals
    ``forward``. ``frozen_names(k)``: the modules the bottom holds (to freeze).
    """

    def __init__(self, folder: EncoderFolder, classes: int, dropout: float = 0.1,
                 attn_implementation: str = "sdpa") -> None:
        import torch

        super().__init__()
        check_head(type(self).__name__, classes, dropout)
        from torchwork.finetune.loading import load_pretrained

        self.architecture = folder.name
        self.encoder = build_encoder(folder, attn_implementation)
        self.dropout = torch.nn.Dropout(dropout)
        self.classifier = torch.nn.Linear(self.encoder.config.hidden_size, classes)
        self._layers_name = _layer_list(self.encoder)
        # names, not modules: a module kept in an attribute would be registered (and saved) twice
        self._projected = getattr(self.encoder, "embeddings_project", None) is not None
        self._owner_name = self._layers_name.rpartition(".")[0]
        self._embedding_args = set(inspect.signature(self.encoder.embeddings.forward).parameters)
        # The file's keys name the bare encoder (or a task model around it): the prefix is found by matching.
        report = load_pretrained(self, folder.weights, new=["classifier"], rename=DROPPED_KEYS, strict=False)
        if report.missing or report.mismatched:
            raise CheckpointError(f"{folder.weights}: {len(report.missing)} tensor(s) missing and "
                                  f"{len(report.mismatched)} of another shape than {folder.path / 'config.json'} "
                                  f"gives ({(report.missing + report.mismatched)[0]}); nothing was loaded: save "
                                  "the model again with save_pretrained.")
        if report.unexpected:
            report.notes.append(f"{len(report.unexpected)} tensor(s) of the file not used (a pretraining head: "
                                f"{', '.join(report.unexpected[:3])}{' ...' if len(report.unexpected) > 3 else ''})")
        self.load_report = report
        self.train()

    @property
    def layers(self) -> Any:
        return self.encoder.get_submodule(self._layers_name)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def frozen_names(self, layers: int) -> list[str]:
        """The module names of the embeddings and the first ``layers`` layers (what :meth:`bottom` runs)."""
        names = ["encoder.embeddings"] + (["encoder.embeddings_project"] if self._projected else [])
        return names + [f"encoder.{self._layers_name}.{i}" for i in range(layers)]

    def _mask(self, hidden: Any, attention_mask: Any) -> Any:
        from transformers.masking_utils import create_bidirectional_mask

        return create_bidirectional_mask(config=self.encoder.config, inputs_embeds=hidden, attention_mask=attention_mask)

    def _run(self, layers: Any, hidden: Any, attention_mask: Any) -> Any:
        mask = self._mask(hidden, attention_mask)
        owner = self.encoder.get_submodule(self._owner_name)
        extra = (owner.compute_position_bias(hidden),) if hasattr(owner, "compute_position_bias") else ()
        for layer in layers:
            out = layer(hidden, mask, *extra)
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden

    def bottom(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None, layers: int = 0) -> tuple[Any, Any]:
        """Embeddings and the first ``layers`` transformer layers: ``(hidden states, attention_mask)``."""
        if not 0 <= layers <= self.num_layers:
            raise ConfigError(f"layers={layers}: this {self.architecture} has {self.num_layers} layers.")
        given = {"token_type_ids": token_type_ids} if token_type_ids is not None and "token_type_ids" in \
            self._embedding_args else {}
        hidden = self.encoder.embeddings(input_ids=input_ids, **given)
        if self._projected:
            hidden = self.encoder.embeddings_project(hidden)
        return self._run(self.layers[:layers], hidden, attention_mask), attention_mask

    def top(self, hidden: Any, attention_mask: Any, start: int = 0) -> Any:
        """Layers ``start``.. , masked mean pooling, dropout and the head: the logits."""
        hidden = self._run(self.layers[start:], hidden, attention_mask)
        return self.classifier(self.dropout(mean_pool(hidden, attention_mask)))

    def embed(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
        """The sentence embedding (mean-pooled last hidden states, not normalised)."""
        hidden, _ = self.bottom(input_ids, attention_mask, token_type_ids, layers=self.num_layers)
        return mean_pool(hidden, attention_mask)

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
        return self.classifier(self.dropout(self.embed(input_ids, attention_mask, token_type_ids)))


class EncoderTop(_module_base()):  # type: ignore[misc]
    """The part of an :class:`EncoderClassifier` above layer ``start``, to train on cached bottom features."""

    def __init__(self, model: EncoderClassifier, start: int) -> None:
        super().__init__()
        if not 0 <= start <= model.num_layers:
            raise ConfigError(f"start={start}: this {model.architecture} has {model.num_layers} layers.")
        self.model, self.start = model, start

    def forward(self, hidden: Any, attention_mask: Any) -> Any:
        return self.model.top(hidden, attention_mask, start=self.start)


MAX_CLASSES = 100_000  # ImageNet-21k has 21,841; a head of more is a mistake (10**9 asked the allocator for 1.5 TB)


def check_head(owner: str, classes: Any, dropout: Any) -> None:
    """The classifier head's settings, before anything is built: 2 to :data:`MAX_CLASSES` classes, a dropout
    probability in [0, 1) (NaN was accepted; 1.5 was torch's ValueError)."""
    if not is_count(classes, 2, MAX_CLASSES):
        raise ConfigError(f"{owner}(classes={quote_value(classes)}): a classifier needs a whole number of classes "
                          f"from 2 to {MAX_CLASSES:,}.")
    if not (is_finite_number(dropout) and 0 <= dropout < 1):
        raise ConfigError(f"{owner}(dropout={quote_value(dropout)}): use a probability from 0 up to (not "
                          "including) 1; 0.1 is the default.")
