"""How many tokens a model should read: each text's token count under the model's own tokenizer, and the
``max_length`` chosen from them (the 95th percentile, rounded up to a multiple of 8, capped by the model).

Example:
    >>> from torchwork.finetune.max_length import choose_max_length
    >>> choose_max_length([10] * 95 + [300] * 5, limit=512), choose_max_length([900] * 10, limit=512)
    (16, 512)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from torchwork.errors import ConfigError
from torchwork.paths import MAX_TOKENIZER_BYTES

PERCENTILE = 95
SHORTEST = 16



def choose_max_length(lengths: Sequence[int], limit: int, percentile: float = PERCENTILE) -> int:
    """The ``percentile``-th percentile of ``lengths`` rounded up to a multiple of 8 (at least 16), capped
    at the model's ``limit``: the longest texts are cut rather than every batch padded for them."""
    if not lengths:
        raise ConfigError("no texts to choose max_length from")
    ordered = sorted(lengths)
    at = ordered[min(len(ordered) - 1, math.ceil(len(ordered) * percentile / 100) - 1)]
    return int(min(limit, max(SHORTEST, 8 * math.ceil(at / 8))))


def token_lengths(texts: Sequence[str], model_folder: str | os.PathLike[str]) -> tuple[list[int], int]:
    """``(lengths, limit)``: each text's token count (special tokens included, nothing cut) with the
    folder's ``tokenizer.json``, and the most positions the model's ``config.json`` allows."""
    from tokenizers import Tokenizer

    from torchwork.finetune.encoders import MAX_CONFIG_BYTES

    folder = Path(model_folder)
    tokenizer = Tokenizer.from_str(_read(folder / "tokenizer.json", MAX_TOKENIZER_BYTES))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    config = json.loads(_read(folder / "config.json", MAX_CONFIG_BYTES))
    limit = int(config.get("max_position_embeddings", 512))
    if config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2  # their positions start after the padding index
    lengths = [len(e.ids) for e in tokenizer.encode_batch(list(texts), add_special_tokens=True)]
    return lengths, limit


def _read(path: Path, limit: int) -> str:
    """The text of a file of the user's model folder, read as a regular file of at most ``limit`` bytes (a FIFO
    would block, a link to ``/dev/zero`` never end); a ConfigError naming it otherwise."""
    from torchwork.paths import FileTooLarge, NotRegularFile, read_regular

    try:
        return read_regular(path, limit).decode("utf-8")
    except (NotRegularFile, FileTooLarge, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} cannot be read as the model's {path.name} ({error}): save the model's "
                          "tokenizer and config again (save_pretrained).") from None
