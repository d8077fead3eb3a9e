"""The pad token of a tokenizer.json saved without a padding section: the vocabulary's, on the training side
(TokenTexts' batches) and the serving side (SubwordTokenizer) alike."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from torchwork.data.subwords import for_batches, pad_token_of


def _vocabulary_tokenizer(vocabulary: dict[str, int]) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token=next(iter(vocabulary))))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


@pytest.mark.parametrize("vocabulary,expected", [
    ({"<s>": 0, "<pad>": 1, "</s>": 2, "late": 3, "flight": 4}, (1, "<pad>")),  # RoBERTa's and MPNet's order
    ({"[PAD]": 0, "[UNK]": 1, "late": 2, "flight": 3}, (0, "[PAD]")),  # BERT's
    ({"<unk>": 0, "late": 1, "flight": 2}, (0, "[PAD]")),  # none named: id 0, as before
])
def test_the_pad_token_comes_from_the_vocabulary_when_the_file_sets_none(vocabulary, expected) -> None:
    tokenizer = _vocabulary_tokenizer(vocabulary)
    assert tokenizer.padding is None and pad_token_of(tokenizer) == expected
    padded = for_batches(tokenizer, max_length=8).encode_batch(["late flight", "late"])
    assert padded[1].ids[-1] == expected[0] and padded[1].attention_mask == [1, 0]


def test_the_file_padding_setting_wins_over_the_vocabulary() -> None:
    tokenizer = _vocabulary_tokenizer({"<s>": 0, "<pad>": 1, "late": 2})
    tokenizer.enable_padding(pad_id=2, pad_token="late")
    assert pad_token_of(tokenizer) == (2, "late")


def test_training_batches_and_the_served_tokenizer_pad_alike(tmp_path) -> None:
    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.recipes.transformer_texts import TokenTexts

    path = tmp_path / "tokenizer.json"
    _vocabulary_tokenizer({"<s>": 0, "<pad>": 1, "</s>": 2, "late": 3, "flight": 4}).save(str(path))
    served = SubwordTokenizer.from_file(path, max_length=8)
    data = TokenTexts(["late flight", "late"], [1, 0], served)
    (ids, mask), labels = data.collate([data[0], data[1]])
    served_ids, served_mask = served(["late flight", "late"])
    assert ids.tolist() == served_ids.tolist() == [[3, 4], [3, 1]] and mask.tolist() == served_mask.tolist()
    assert data.subset([1]).pad_id == 1 and labels.tolist() == [1, 0]


def test_a_fifo_or_a_device_is_refused_as_a_tokenizer_without_blocking(tmp_path) -> None:
    """A FIFO named tokenizer.json or subword.json (or a link to /dev/zero) would block or never end a
    whole-file read: each is refused in one line, at once."""
    import os

    from fifo_guard import returns_within

    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.errors import ConfigError

    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"tokenizer\.json is not a regular file \(a FIFO\)"):
        returns_within(5, lambda: SubwordTokenizer.from_file(fifo), fifo)
    folder = tmp_path / "saved"
    folder.mkdir()
    _vocabulary_tokenizer({"<pad>": 0, "late": 1}).save(str(folder / "tokenizer.json"))
    os.mkfifo(folder / "subword.json")
    with pytest.raises(ConfigError, match=r"does not hold a SubwordTokenizer .*not a regular file \(a FIFO\)"):
        returns_within(5, lambda: SubwordTokenizer.load(folder), folder / "subword.json")
    (folder / "subword.json").unlink()
    (folder / "subword.json").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"not a regular file \(a character device\)"):
        returns_within(5, lambda: SubwordTokenizer.load(folder))
