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

# The pad tokens of the vocabularies in use: WordPiece's (BERT, DistilBERT, ELECTRA, MiniLM: id 0) and
# byte-level BPE's (RoBERTa, MPNet: id 1, where id 0 is the start token <s>).
PAD_TOKENS = ("[PAD]", "<pad>")


def pad_token_of(tokenizer: Any) -> tuple[int, str]:
    """``(id, token)`` to pad with: the file's padding setting, else the vocabulary's pad token, else id 0.

    A tokenizer.json saved without a padding section (the usual case) still has its pad token in the
    vocabulary; padding RoBERTa's ids with 0 would fill the rows with ``<s>``.

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> pad_token_of(Tokenizer(models.WordLevel({"<s>": 0, "<pad>": 1, "a": 2}, unk_token="a")))
        (1, '<pad>')
    """
    if tokenizer.padding:
        return int(tokenizer.padding.get("pad_id", 0)), str(tokenizer.padding.get("pad_token", "[PAD]"))
    for token in PAD_TOKENS:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found), token
    return 0, PAD_TOKENS[0]


def for_batches(tokenizer: Any, max_length: int, pad_to: int | None = None) -> Any:
    """``tokenizer`` truncating at ``max_length`` and padding with its pad token (:func:`pad_token_of`) to each
    batch's longest text, or to ``pad_to``."""
    pad_id, pad_token = pad_token_of(tokenizer)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token, length=pad_to)
    return tokenizer
