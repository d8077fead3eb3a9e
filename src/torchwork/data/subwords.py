"""A ``tokenizers`` tokenizer set up for batches: truncated at ``max_length``, padded to the longest text of
each batch (or to ``pad_to``), not to the fixed length a ``tokenizer.json`` may carry (MiniLM's: 128).

One place for the training side (:func:`torchwork.finetune.minilm_tokenizer`) and the serving side
(:class:`torchwork.deploy.wordpiece.SubwordTokenizer`), so that both encode a text alike.

Example:
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> words = Tokenizer(models.WordLevel({"[PAD]": 0, "a": 1}, unk_token="a"))
    >>> words.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok = for_batches(words, max_length=4)
    >>> [e.ids for e in tok.encode_batch(["a a", "a"])]
    [[1, 1], [1, 0]]
"""

from __future__ import annotations

from typing import Any


def for_batches(tokenizer: Any, max_length: int, pad_to: int | None = None) -> Any:
    """``tokenizer`` truncating at ``max_length`` and padding with the file's pad token (``[PAD]``, id 0 when
    it names none) to each batch's longest text, or to ``pad_to``."""
    padding = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"),
                             length=pad_to)
    return tokenizer
