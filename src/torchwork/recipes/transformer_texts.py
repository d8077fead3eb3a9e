"""The sentiment recipe's transformer data: texts as the encoder's token ids, batched by length, and
predictions over them, from the whole model or from the top on its cached bottom features.

Example:
    >>> data = TokenTexts(["a great flight", "late again"], [2, 0], subword_tokenizer(16))
    >>> len(data), data.labels, data.lengths, data[1][0].tolist() == data.subset([1])[0][0].tolist()
    (2, [2, 0], [5, 4], True)
    >>> (ids, mask), labels = data.collate([data[0], data[1]])  # padded with the tokenizer's pad id
    >>> ids[1, -1].item() == data.pad_id, mask[1].tolist()
    (True, [1, 1, 1, 1, 0])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.finetune.features import release_memory as release_memory  # the recipe's, after training


def subword_tokenizer(max_length: int, model_dir: str = "") -> Any:
    """The ``tokenizer.json`` of ``model_dir`` (default: MiniLM's WordPiece) as an artifact preprocessor."""
    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.finetune.minilm import minilm_folder

    return SubwordTokenizer.from_file(Path(model_dir or minilm_folder()) / "tokenizer.json", max_length=max_length)


class TokenTexts:
    """A map-style dataset of ``(token ids without padding, label)`` from texts and a SubwordTokenizer.

    The texts are tokenized a chunk at a time and their ids kept in one int32 array: ``encode_batch`` over
    a whole split at once held every text's encoding (tokens, offsets, masks, padded to the split's longest)
    until the end, and a list of Python ints costs about 36 bytes a token against 4 here. On the 36,003
    cleaned tweets the process peaked 314 MB above its start while tokenizing and kept 272 MB; this way,
    27 MB at the peak and after.
    """

    CHUNK = 2048

    def __init__(self, texts: Sequence[str], labels: Sequence[int], tokenizer: Any) -> None:
        import numpy as np

        texts = list(texts)
        pieces = [np.asarray(encoding.ids[:sum(encoding.attention_mask)], dtype=np.int32)
                  for start in range(0, len(texts), self.CHUNK)
                  for encoding in tokenizer.tokenizer.encode_batch(texts[start:start + self.CHUNK])]
        self._keep(pieces, labels, int(tokenizer.tokenizer.padding["pad_id"]))

    def _keep(self, pieces: Sequence[Any], labels: Sequence[int], pad_id: int) -> None:
        import numpy as np

        self.pad_id = pad_id  # the tokenizer's (RoBERTa's and MPNet's <pad> is 1; 0 is their <s>)
        self._ids = np.concatenate(pieces) if len(pieces) else np.zeros(0, dtype=np.int32)
        self._ends = np.cumsum([len(piece) for piece in pieces], dtype=np.int64)
        self.labels = [int(label) for label in labels]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        """The text's token ids (an int32 array, a view) and its label."""
        index = range(len(self))[index]  # negative indices as a list's; IndexError past the end
        start = int(self._ends[index - 1]) if index else 0
        return self._ids[start:int(self._ends[index])], self.labels[index]

    @property
    def lengths(self) -> list[int]:
        import numpy as np

        return np.diff(self._ends, prepend=0).tolist()

    def subset(self, rows: Sequence[int]) -> TokenTexts:
        """These ``rows`` (indices), not tokenized again."""
        part = object.__new__(TokenTexts)
        part._keep([self[i][0] for i in rows], [self.labels[i] for i in rows], self.pad_id)
        return part

    def collate(self, items: Sequence[tuple[Any, int]]) -> tuple[tuple[Any, Any], Any]:
        """``((input_ids, attention_mask), labels)`` of ``items``, padded with the tokenizer's pad id: what the
        served artifact's tokenizer pads with too."""
        from torchwork.recipes.buckets import pad_batch

        return pad_batch(items, self.pad_id)

    def collate_for_prediction(self, items: Sequence[tuple[Any, int]]) -> tuple[tuple[Any, Any], Any]:
        """:meth:`collate`, the width rounded up to a multiple of
        :data:`~torchwork.recipes.buckets.PREDICT_WIDTH_MULTIPLE` (batches that are only predicted)."""
        from torchwork.recipes.buckets import PREDICT_WIDTH_MULTIPLE, pad_batch

        return pad_batch(items, self.pad_id, PREDICT_WIDTH_MULTIPLE)


def bottom_module(model: Any, layers: int) -> Any:
    from torch import nn

    class Bottom(nn.Module):  # the frozen prefix: embeddings and the first ``layers`` layers, and only those
        def __init__(self) -> None:
            super().__init__()
            self.frozen = nn.ModuleList(model.get_submodule(name) for name in model.frozen_names(layers))
            self.run_bottom = model.bottom  # a bound method: the top's weights are not registered here

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.run_bottom(input_ids, attention_mask, layers=layers)

    return Bottom()


def length_loader(data: Any, lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int, collate: Any) -> Any:
    """A DataLoader of ``data`` in batches of like length (:class:`~torchwork.recipes.buckets.LengthBuckets`)."""
    import torch

    from torchwork.recipes.buckets import LengthBuckets

    return torch.utils.data.DataLoader(data, batch_sampler=LengthBuckets(lengths, batch_size, shuffle=shuffle,
                                                                         seed=seed), collate_fn=collate)


def predict_outputs(model: Any, data: TokenTexts, batch_size: int = 64, device: Any = "cpu",
                    desc: str = "predicting") -> Any:
    """The outputs (logits) of ``model`` over ``data`` in the data's order (batched by length), with a
    progress line: the whole model over thousands of tweets takes minutes on a CPU."""
    import torch

    from torchwork.engine.progress import ProgressBar
    from torchwork.recipes.buckets import LengthBuckets

    model.eval()
    out = torch.empty((len(data), model.classifier.out_features))
    batches = LengthBuckets(data.lengths, batch_size, shuffle=False)
    bar = ProgressBar(len(batches), desc=desc)
    with torch.inference_mode():
        for batch in batches:
            (ids, mask), _ = data.collate_for_prediction([data[i] for i in batch])
            out[batch] = model(ids.to(device), mask.to(device)).float().cpu()
            bar.update(len(batch))
    bar.close()
    return out


def predict_probabilities(model: Any, data: TokenTexts, batch_size: int = 64, device: Any = "cpu",
                          desc: str = "predicting") -> Any:
    """Softmax probabilities of ``model`` over ``data`` in the data's order (:func:`predict_outputs`)."""
    return predict_outputs(model, data, batch_size, device, desc).softmax(dim=-1)


def cached_probabilities(top: Any, cache: Any, lengths: Sequence[int], rows: Sequence[int] | None = None,
                         batch_size: int = 128, desc: str = "predicting") -> tuple[Any, list[int]]:
    """Softmax probabilities of ``top`` over a split's cached bottom features, and the rows' labels.

    ``cache`` holds the split's rows in the order :func:`length_loader` cached them (by length, ``LengthBuckets``
    without shuffling, over ``lengths``); ``rows``: indices into the split (default: every row). The rows
    are read in that order, so a batch of ``batch_size`` is trimmed to its own longest row.
    """
    import torch

    from torchwork.engine.progress import ProgressBar
    from torchwork.recipes.buckets import LengthBuckets, trim_cached_for_prediction

    order = [index for batch in LengthBuckets(lengths, 64, shuffle=False) for index in batch]
    if rows is None:
        positions = list(range(len(order)))
    else:
        where = {row: position for position, row in enumerate(order)}
        positions = sorted(where[row] for row in rows)
    top.eval()
    outputs: list[Any] = []
    labels: list[int] = []
    bar = ProgressBar(-(-len(positions) // batch_size), desc=desc)  # counts batches, and their rows
    with torch.inference_mode():
        for start in range(0, len(positions), batch_size):
            (hidden, mask), target = trim_cached_for_prediction([cache[k] for k in positions[start:start + batch_size]])
            outputs.append(top(hidden, mask).float().softmax(dim=-1))
            labels.extend(int(label) for label in target.tolist())
            bar.update(len(target))
    bar.close()
    return torch.cat(outputs), labels
