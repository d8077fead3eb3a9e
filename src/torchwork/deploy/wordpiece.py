"""A subword tokenizer for artifacts: texts -> ``(input_ids, attention_mask)``, read with ``tokenizers``.

It carries a Hugging Face ``tokenizer.json`` (WordPiece for BERT / MiniLM) into the artifact and reads it
back at serve time with the small ``tokenizers`` library alone: serving never imports ``transformers``.
Texts are truncated at ``max_length`` tokens and padded to the longest text of the call (not to a fixed
length), so a batch of short tweets costs what short tweets cost. It has the artifact preprocessor
interface: ``save(directory)`` (JSON files only), the classmethod ``load(directory)`` and ``__call__``.

Example:
    >>> from torchwork.finetune.minilm import minilm_folder
    >>> pre = SubwordTokenizer.from_file(minilm_folder() / "tokenizer.json", max_length=64)
    >>> ids, mask = pre(["the flight was late", "great crew"])
    >>> ids.shape, mask.tolist()[1]
    (torch.Size([2, 6]), [1, 1, 1, 1, 0, 0])
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.data.subwords import for_batches
from torchwork.errors import ConfigError
from torchwork.paths import MAX_TOKENIZER_BYTES as MAX_TOKENIZER_BYTES  # deploy's public name for the bound

TOKENIZER_FILE = "tokenizer.json"
SETTINGS_FILE = "subword.json"
MAX_SETTINGS_BYTES = 64 * 2**10  # subword.json holds two settings
# The largest vocabularies in use have about 256k tokens (Gemma's 256,000); an id past this is a damaged or
# forged tokenizer.json, whose ids would index far past any embedding table.
MAX_TOKEN_ID = 1 << 21
# Longer than any position table of the encoders this serves (BERT/MiniLM: 512; long-context ones: 8192): a
# max_length past it is a damaged subword.json, whose texts would outrun the model's positions.
MAX_LENGTH = 8192


def _check_size(size: int, where: object) -> None:
    if size > MAX_TOKENIZER_BYTES:
        raise ConfigError(f"{where} is {size / 2**20:.0f} MiB, over the {MAX_TOKENIZER_BYTES // 2**20} MiB a "
                          "tokenizer.json may take (real vocabularies are under 20 MB; parsing one this size "
                          "costs gigabytes per process): it is not a tokenizer to load.")


class SubwordTokenizer:
    """``tokenizers.Tokenizer`` + truncation at ``max_length`` + padding to the longest text of each call."""

    def __init__(self, tokenizer_json: str, max_length: int = 128) -> None:
        from tokenizers import Tokenizer

        if isinstance(max_length, bool) or not isinstance(max_length, int) or not 2 <= max_length <= MAX_LENGTH:
            raise ConfigError(f"max_length={str(max_length)[:40]}: use an integer from 2 to {MAX_LENGTH} (special "
                              "tokens included; at most the model's position embeddings, 512 for BERT/MiniLM).")
        _check_size(len(tokenizer_json), "the tokenizer.json text")
        try:
            tokenizer = Tokenizer.from_str(tokenizer_json)
        except Exception as error:
            raise ConfigError(f"not a tokenizers tokenizer.json: {error}") from None
        self.tokenizer_json, self.max_length = tokenizer_json, max_length
        self.tokenizer = for_batches(tokenizer, max_length)
        self.largest_id = max([*tokenizer.get_vocab(with_added_tokens=True).values(),
                               int((tokenizer.padding or {}).get("pad_id", 0))])
        if self.largest_id >= MAX_TOKEN_ID:
            raise ConfigError(f"the tokenizer.json gives a token the id {self.largest_id}; ids must be below "
                              f"{MAX_TOKEN_ID} (the largest vocabularies have about 256,000 tokens): it is damaged. "
                              "Save the model's own tokenizer.json again.")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], max_length: int = 128) -> SubwordTokenizer:
        from torchwork.paths import NotRegularFile, read_regular

        path = Path(path)
        if not path.exists():
            raise ConfigError(f"{path} does not exist: pass a tokenizer.json file.")
        try:
            _check_size(path.stat().st_size, path)
            text = read_regular(path, MAX_TOKENIZER_BYTES).decode("utf-8")
        except NotRegularFile as error:
            raise ConfigError(f"{path} is {str(error)}: pass a tokenizer.json file.") from None
        except (OSError, ValueError) as error:
            raise ConfigError(f"{path} cannot be read as a tokenizer.json ({error}): pass a tokenizer.json "
                              "file.") from None
        return cls(text, max_length)

    def __call__(self, texts: Sequence[str] | str, max_length: int | None = None) -> tuple[Any, Any]:
        """``(input_ids, attention_mask)``; ``max_length``: the server's bound when the artifact was exported
        with one (``export(max_length=N)``), which cuts the ids further when it is below the tokenizer's."""
        import torch

        if isinstance(texts, str):
            texts = [texts]
        bad = next((t for t in texts if not isinstance(t, str)), None)
        if bad is not None:
            raise ConfigError(f"SubwordTokenizer takes texts, got a {type(bad).__name__}.")
        if not texts:
            raise ConfigError("SubwordTokenizer got no texts.")
        encodings = self.tokenizer.encode_batch(list(texts))
        cut = slice(None, max_length)
        return (torch.tensor([e.ids[cut] for e in encodings], dtype=torch.long),
                torch.tensor([e.attention_mask[cut] for e in encodings], dtype=torch.long))

    def extreme_inputs(self) -> tuple[Any, Any]:
        """One row of ``max_length`` tokens, each the vocabulary's largest id: the furthest any text reaches into
        the model's embedding and position tables (an artifact runs it once when it loads, so that a
        tokenizer the model cannot take is refused there, not at a request)."""
        import torch

        ids = torch.full((1, self.max_length), self.largest_id, dtype=torch.long)
        return ids, torch.ones_like(ids)

    def lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text (special tokens included, after truncation), to bucket texts by length."""
        return [sum(e.attention_mask) for e in self.tokenizer.encode_batch(list(texts))]

    def save(self, directory: str | os.PathLike[str]) -> None:
        from torchwork.files import atomic_write, write_json

        with atomic_write(Path(directory) / TOKENIZER_FILE, "w") as handle:
            handle.write(self.tokenizer_json)
        write_json(Path(directory) / SETTINGS_FILE, {"max_length": self.max_length, "tokenizer": TOKENIZER_FILE})

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> SubwordTokenizer:
        from torchwork.paths import read_regular

        directory = Path(directory)
        try:  # regular files only, bounded: a FIFO would block, a link to /dev/zero never end
            settings = json.loads(read_regular(directory / SETTINGS_FILE, MAX_SETTINGS_BYTES).decode("utf-8"))
            _check_size((directory / TOKENIZER_FILE).stat().st_size, directory / TOKENIZER_FILE)
            text = read_regular(directory / TOKENIZER_FILE, MAX_TOKENIZER_BYTES).decode("utf-8")
        except (OSError, ValueError) as error:
            raise ConfigError(f"{directory} does not hold a SubwordTokenizer ({SETTINGS_FILE} and "
                              f"{TOKENIZER_FILE}): {error}") from None
        max_length = settings.get("max_length", 128) if isinstance(settings, dict) else None
        try:
            return cls(text, max_length)  # type: ignore[arg-type]  # checked there
        except ConfigError as error:
            raise ConfigError(f"{directory / SETTINGS_FILE} or {TOKENIZER_FILE} beside it: {error}") from None
