"""finetune/max_length.py reads a user's model folder: tokenizer.json and config.json only as regular files of
bounded size (a FIFO would block ``fit`` for ever, a huge or endless file fill memory), each refusal a
ConfigError naming the file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fifo_guard import returns_within

from torchwork.errors import ConfigError
from torchwork.finetune.encoders import minilm_folder
from torchwork.finetune.max_length import token_lengths

TEXTS = ["a short text", "a somewhat longer text than the first one"]


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    """The bundled MiniLM's tokenizer.json and config.json, copied: each test replaces one of them."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("tokenizer.json", "config.json"):
        shutil.copyfile(minilm_folder() / name, folder / name)
    return folder


def test_token_lengths_of_a_real_folder(model_folder: Path) -> None:
    lengths, limit = token_lengths(TEXTS, model_folder)
    assert limit == 512 and lengths[0] < lengths[1]


@pytest.mark.parametrize("name", ["tokenizer.json", "config.json"])
def test_a_file_of_the_model_folder_that_is_a_fifo_is_refused_not_waited_on(model_folder: Path, name: str) -> None:
    (model_folder / name).unlink()
    os.mkfifo(model_folder / name)
    with pytest.raises(ConfigError, match=f"{name} cannot be read as the model's {name} \\(not a regular file "
                                          "\\(a FIFO\\)\\)"):
        returns_within(10, lambda: token_lengths(TEXTS, model_folder), model_folder / name)


def test_an_oversized_tokenizer_is_refused_unread(model_folder: Path, within) -> None:
    (model_folder / "tokenizer.json").unlink()
    with (model_folder / "tokenizer.json").open("wb") as out:
        out.truncate(65 * 2**20)  # sparse: over the 64 MiB a tokenizer.json may take
    with within(20), pytest.raises(ConfigError, match="tokenizer.json cannot be read .*over 64 MiB"):
        token_lengths(TEXTS, model_folder)
