"""Tokenizer and vocabulary for text models trained from scratch, saved with the run as JSON.

Training, export and serving all call the same :class:`TextPreprocessor`, loaded from the same
``preprocess.json``, so a served request is cleaned and numbered exactly as the training data was.

Example:
    >>> import tempfile
    >>> from torchwork.data.text import TextPreprocessor
    >>> pre = TextPreprocessor.fit(["a good film", "a bad film", "good good"], min_freq=1)
    >>> ids, lengths = pre(["a good film", "", "unseen words"])
    >>> ids.shape, lengths.tolist()
    (torch.Size([3, 3]), [3, 1, 2])
    >>> directory = tempfile.mkdtemp()
    >>> _ = pre.save(directory)
    >>> TextPreprocessor.load(directory) == pre
    True
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.data.cleaning import CleaningConfig, clean_text
from torchwork.deprecation import renamed_keywords
from torchwork.errors import ConfigError, DataError
from torchwork.files import write_json
from torchwork.finite import check_count, is_count
from torchwork.quoting import quote_value

if TYPE_CHECKING:  # pragma: no cover
    import torch

FORMAT = "torchwork.text-preprocessor/1"
FILENAME = "preprocess.json"
PAD, UNK = "<pad>", "<unk>"
MAX_TOKENS = 2**20  # tokens kept of one text, as the recipes' max_length cap (recipes.config.MAX_TOKENS)
MAX_WORDS = 10**9  # words counted or kept, as the recipes' min_freq and max_vocab caps (recipes.config.MAX_ROWS)


def check_max_length(value: int | None, name: str = "max_length") -> int | None:
    """``value`` as an int, or None: a token count in ``[1, 2**20]`` (the longest text a model reads), else a
    ConfigError naming ``name``.

    Example:
        >>> check_max_length(0)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: max_length=0 must be an integer in [1, 1048576] (tokens kept of a text, 2**20), or None for no cap.
    """
    if value is None:
        return None
    return check_count(value, name, 1, MAX_TOKENS, " (tokens kept of a text, 2**20), or None for no cap")


def _ftfy_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ftfy")
    except PackageNotFoundError:
        return None


class TextPreprocessor:
    """Clean, split into tokens and number texts; pad a batch into ``(ids, lengths)`` tensors.

    Tokens are the cleaning's replacement tokens (``<url>``, ``<user>``, ``<num>``), words (with inner
    apostrophes: ``don't``) and single punctuation marks. Id 0 is padding, id 1 the unknown token, then
    the training vocabulary by falling frequency (ties alphabetical, so a fit is reproducible).
    """

    pad_id = 0
    unk_id = 1

    def __init__(self, vocab: Sequence[str], cleaning: CleaningConfig | None = None,
                 max_length: int | None = None, fit_info: dict[str, Any] | None = None) -> None:
        max_length = check_max_length(max_length)  # named even when the vocabulary is good
        vocab = list(vocab)
        if vocab[:2] != [PAD, UNK]:
            raise DataError(f"a vocabulary must start with {[PAD, UNK]} (ids 0 and 1), got {vocab[:2]}. "
                            "Build one with TextPreprocessor.fit(texts).")
        if len(set(vocab)) != len(vocab):
            raise DataError("the vocabulary lists a token twice; rebuild it with TextPreprocessor.fit(texts).")
        self.vocab = vocab
        self.cleaning = cleaning or CleaningConfig()
        self.max_length = max_length
        self.fit_info = dict(fit_info or {})
        self.index = {token: i for i, token in enumerate(vocab)}
        specials = "|".join(re.escape(t) for t in self.cleaning.special_tokens())
        self._token_re = re.compile((specials + "|" if specials else "") + r"\w+(?:'\w+)*|[^\w\s]")

    @classmethod
    @renamed_keywords(max_size="max_vocab")
    def fit(cls, texts: Iterable[str], *, min_freq: int = 2, max_vocab: int | None = 30_000,
            cleaning: CleaningConfig | None = None, max_length: int | None = None) -> TextPreprocessor:
        """Build the vocabulary from the training texts only (never validation or test).

        Keeps tokens seen at least ``min_freq`` times, at most ``max_vocab`` entries in all (the two
        special tokens included, so ``max_vocab`` is the ``vocab_size`` an embedding needs). ``max_size``
        is the deprecated name of ``max_vocab``.
        """
        check_max_length(max_length)  # before the texts are counted
        check_count(min_freq, "min_freq", 1, MAX_WORDS, " (how often a word is seen to be kept)")  # NaN passed '< 1'
        if max_vocab is not None and not is_count(max_vocab, 3, MAX_WORDS):
            raise ConfigError(f"max_vocab={quote_value(max_vocab)} leaves no room for a word beside {PAD} and "
                              f"{UNK}, or is no count: use an integer in [3, {MAX_WORDS}], or None for no limit.")
        probe = cls([PAD, UNK], cleaning)
        counts: Counter[str] = Counter()
        rows = 0
        for text in texts:
            counts.update(probe.tokenize(text))
            rows += 1
        if rows == 0:
            raise DataError("TextPreprocessor.fit got no texts; pass the training texts.")
        ranked = sorted((t for t, c in counts.items() if c >= min_freq and t not in (PAD, UNK)),
                        key=lambda t: (-counts[t], t))
        if max_vocab is not None:
            ranked = ranked[: max_vocab - 2]
        kept = sum(counts[t] for t in ranked)
        info = {"min_freq": min_freq, "max_vocab": max_vocab, "texts": rows, "distinct_tokens": len(counts),
                "token_coverage": round(kept / max(1, sum(counts.values())), 6)}
        return cls([PAD, UNK, *ranked], cleaning, max_length, info)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def clean(self, text: str) -> str:
        """The cleaned text, exactly as training saw it."""
        return clean_text(text, self.cleaning)

    def tokenize(self, text: str) -> list[str]:
        return self._token_re.findall(self.clean(text))

    def encode(self, text: str) -> list[int]:
        """Token ids of one text; never empty (an empty text becomes ``[unk_id]``)."""
        ids = [self.index.get(token, self.unk_id) for token in self.tokenize(text)]
        return ids or [self.unk_id]

    def __call__(self, texts: Sequence[str], max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a batch: ``ids`` LongTensor (N, L) right-padded with 0, ``lengths`` LongTensor (N,).

        ``L`` is the longest row, cut to ``max_length`` (the argument, else the one saved with the
        preprocessor, else no limit); longer texts keep their first tokens. Every length is at least 1.
        """
        import torch

        if isinstance(texts, (str, bytes)):
            raise ConfigError("TextPreprocessor takes a list of texts; wrap a single text as [text].")
        limit = check_max_length(max_length) if max_length is not None else self.max_length
        rows = [self.encode(t)[:limit] if limit else self.encode(t) for t in texts]
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        if not rows:
            return torch.full((0, 1), self.pad_id, dtype=torch.long), lengths
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows], dtype=torch.long)  # one copy
        return ids, lengths

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of a row of ids, padding left out."""
        return [self.vocab[int(i)] for i in ids if int(i) != self.pad_id]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "cleaning": self.cleaning.to_dict(), "max_length": self.max_length,
                "pad_token": PAD, "unk_token": UNK, "fit": self.fit_info, "ftfy_version": _ftfy_version(),
                "vocab": list(self.vocab)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "the dict") -> TextPreprocessor:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise DataError(f"{source} is not a torchwork text preprocessor (format {found!r}, expected "
                            f"{FORMAT!r}). Save one with TextPreprocessor.save(directory).")
        missing = [k for k in ("cleaning", "vocab") if k not in data]
        if missing:
            raise DataError(f"{source} lacks {missing}; it is damaged. Save the preprocessor again.")
        saved, here = data.get("ftfy_version"), _ftfy_version()
        if data["cleaning"].get("fix_mojibake") and saved and saved != here:
            warnings.warn(f"{source} was written with ftfy {saved}, this environment has ftfy {here}: "
                          "mojibake repair may differ slightly from training. Pin ftfy=={saved}.",
                          stacklevel=2)
        return cls(data["vocab"], CleaningConfig.from_dict(data["cleaning"]), data.get("max_length"),
                   data.get("fit"))

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``directory/preprocess.json`` atomically and return its path."""
        path = Path(directory) / FILENAME
        write_json(path, self.to_dict())
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> TextPreprocessor:
        """Load from a run directory (or the ``preprocess.json`` file itself)."""
        path = Path(directory)
        if path.is_dir():
            path = path / FILENAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"no text preprocessor at {path}. Save it with the run: "
                            "TextPreprocessor.save(run_directory).") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise DataError(f"{path} is not valid JSON ({error}); the file is damaged. Save the "
                            "preprocessor again.") from None
        return cls.from_dict(data, source=str(path))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TextPreprocessor):
            return NotImplemented
        return (self.vocab, self.cleaning, self.max_length) == (other.vocab, other.cleaning, other.max_length)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"TextPreprocessor(vocab_size={self.vocab_size}, max_length={self.max_length}, "
                f"cleaning={self.cleaning})")


class TextCollate:
    """Turn a list of ``(text, label)`` items into ``((ids, lengths), labels)``.

    ``ids`` is LongTensor (B, L) padded with 0, ``lengths`` LongTensor (B,), ``labels`` LongTensor (B,).
    The engine calls ``model(ids, lengths)``. A class rather than a closure, so that worker processes
    started with ``spawn`` can pickle it.

    Example:
        >>> pre = TextPreprocessor.fit(["good film", "bad film"], min_freq=1)
        >>> (ids, lengths), labels = TextCollate(pre)([("good film", 1), ("bad", 0)])
        >>> ids.tolist(), lengths.tolist(), labels.tolist()
        ([[4, 2], [3, 0]], [2, 1], [1, 0])
    """

    def __init__(self, preprocessor: TextPreprocessor, max_length: int | None = None) -> None:
        self.preprocessor = preprocessor
        self.max_length = check_max_length(max_length)  # refused when made, not in a worker process

    def __call__(self, items: Sequence[tuple[str, int]]) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        import torch

        try:
            texts, labels = zip(*items)
        except (TypeError, ValueError):
            raise DataError(f"TextCollate expects (text, label) items, got {str(items[:1])[:80]}. Make "
                            "the Dataset return (text, label) pairs.") from None
        ids, lengths = self.preprocessor(list(texts), self.max_length)
        return (ids, lengths), torch.as_tensor(labels, dtype=torch.long)
