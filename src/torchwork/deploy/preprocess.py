"""A minimal text preprocessor for artifacts: words -> token ids with a fixed vocabulary.

It follows the interface every artifact preprocessor has (and that ``torchwork.data.text.TextPreprocessor``
shares): ``save(directory)`` writes JSON only, the classmethod ``load(directory)`` reads it back, and
``__call__(texts, max_length=None)`` returns ``(ids LongTensor (N, L), lengths LongTensor (N,))``.
Use it when you have no tokenizer of your own; ``load_artifact`` reloads it from the artifact.

Example:
    >>> pre = TokenIdsPreprocessor.fit(["a good movie", "a bad movie"])
    >>> ids, lengths = pre(["good movie", "unknown words here"])
    >>> ids.shape, lengths.tolist()
    (torch.Size([2, 3]), [2, 3])
"""

from __future__ import annotations

import collections
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchwork.deprecation import Renamed, renamed_keywords
from torchwork.errors import ConfigError

PAD, UNK = 0, 1
_TOKEN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")
VOCAB_FILE = "vocab.json"


def tokenize(text: str) -> list[str]:
    """Lowercased words (letters, digits, apostrophes) and single punctuation marks."""
    return _TOKEN.findall(text.lower())


class TokenIdsPreprocessor:
    """Texts -> right-padded token ids (``0`` = padding, ``1`` = unknown word) and lengths."""

    def __init__(self, vocabulary: Mapping[str, int], max_length: int | None = None) -> None:
        ids = sorted(vocabulary.values())
        if any(i < 2 for i in ids) or len(set(ids)) != len(ids):
            raise ConfigError("vocabulary ids must be distinct and >= 2 (0 is padding, 1 is unknown).")
        if max_length is not None and max_length < 1:
            raise ConfigError(f"max_length={max_length} must be >= 1.")
        self.vocabulary = dict(vocabulary)
        self.max_length = max_length

    @property
    def vocab_size(self) -> int:
        """Rows an ``nn.Embedding`` needs: the largest id + 1."""
        return max(self.vocabulary.values(), default=UNK) + 1

    @classmethod
    @renamed_keywords(min_count="min_freq",
                      max_words=Renamed("max_vocab", lambda words: words + 2, "max_words=N is max_vocab=N + 2: "
                                        "max_vocab counts the padding and unknown ids too"))
    def fit(cls, texts: Iterable[str], *, min_freq: int = 1, max_vocab: int = 20_002,
            max_length: int | None = None) -> TokenIdsPreprocessor:
        """Vocabulary of the most frequent tokens seen at least ``min_freq`` times, ``max_vocab`` ids in all.

        The names and meanings are :meth:`torchwork.data.text.TextPreprocessor.fit`'s: ``max_vocab`` counts
        the padding and unknown ids, so it is the ``vocab_size`` an embedding needs. ``min_count`` and
        ``max_words`` (words only: ``max_vocab - 2``) are the deprecated names.
        """
        if min_freq < 1:
            raise ConfigError(f"min_freq={min_freq} must be at least 1.")
        if max_vocab < 3:
            raise ConfigError(f"max_vocab={max_vocab} leaves no room for a word beside the padding and unknown "
                              "ids; use at least 3.")
        counts = collections.Counter(token for text in texts for token in tokenize(text))
        common = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_freq]
        return cls({word: index + 2 for index, word in enumerate(common[:max_vocab - 2])}, max_length)

    def __call__(self, texts: Sequence[str] | str, max_length: int | None = None) -> tuple[Any, Any]:
        import torch

        if isinstance(texts, str):
            texts = [texts]
        limit = max_length or self.max_length
        rows = []
        for text in texts:
            if not isinstance(text, str):
                raise ConfigError(f"TokenIdsPreprocessor takes texts, got a {type(text).__name__}.")
            ids = [self.vocabulary.get(token, UNK) for token in tokenize(text)][:limit] or [UNK]
            rows.append(ids)  # an empty text becomes one unknown token, so that a mean never divides by zero
        width = max((len(r) for r in rows), default=1)
        batch = torch.full((len(rows), width), PAD, dtype=torch.long)
        for index, row in enumerate(rows):
            batch[index, : len(row)] = torch.tensor(row, dtype=torch.long)
        return batch, torch.tensor([len(r) for r in rows], dtype=torch.long)

    def save(self, directory: str | os.PathLike[str]) -> None:
        from torchwork.files import write_json

        write_json(Path(directory) / VOCAB_FILE, {"max_length": self.max_length, "vocabulary": self.vocabulary})

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> TokenIdsPreprocessor:
        data = json.loads((Path(directory) / VOCAB_FILE).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("vocabulary"), dict):
            raise ConfigError(f"{Path(directory) / VOCAB_FILE} is not a TokenIdsPreprocessor vocabulary.")
        return cls({str(k): int(v) for k, v in data["vocabulary"].items()}, data.get("max_length"))
