"""Models the recipes train from scratch.

Example:
    >>> import torch
    >>> from torchwork.recipes.models import AdaptiveDepthCNN
    >>> AdaptiveDepthCNN(classes=10)(torch.zeros(2, 1, 28, 28)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import torch
from torch import nn


def subword_table(vocab: Sequence[str], buckets: int, max_subwords: int = 24) -> torch.Tensor:
    """Hashed character 3- to 5-grams of each vocabulary word (fastText subwords), padded with 0.

    Row ``i`` lists the n-gram ids of word ``i`` (``"<word>"`` with boundary marks); special tokens and
    one-letter words get none. crc32 keeps the hash identical across processes and Python versions.
    """
    rows = []
    for word in vocab:
        marked = f"<{word}>"
        grams = sorted({marked[i:i + n] for n in (3, 4, 5) for i in range(len(marked) - n + 1)}) \
            if len(word) > 1 and not word.startswith("<") else []
        ids = [1 + zlib.crc32(g.encode("utf-8")) % (buckets - 1) for g in grams][:max_subwords]
        rows.append(ids + [0] * (max_subwords - len(ids)))
    return torch.tensor(rows, dtype=torch.int32)  # half the size of int64 in the exported artifact


def document_frequency(feature_ids: torch.Tensor, size: int) -> torch.Tensor:
    """In how many rows each id of ``feature_ids`` (N, K) appears at least once; id 0 (none) is not counted.

    Example:
        >>> document_frequency(torch.tensor([[3, 3, 1, 0], [1, 2, 0, 0]]), 4).tolist()
        [0, 2, 1, 1]
    """
    ordered = feature_ids.sort(dim=1).values
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return torch.bincount(ordered[first & (ordered != 0)], minlength=size)


def _unfitted_idf(size: int) -> torch.Tensor:
    """Weight 1 for every feature until :meth:`TfidfNGramClassifier.fit_idf`, 0 for id 0 (no feature)."""
    table = torch.ones(size)
    table[0] = 0.0
    return table


class TfidfNGramClassifier(nn.Module):
    """A linear text classifier over TF-IDF-weighted n-grams, learned end to end: words, hashed word
    bigrams and hashed character 3- to 5-grams of each word (fastText subwords, for typos and inflections).

    Each feature has one weight per class (``nn.Embedding(features, classes)``). A text's features are
    weighted by their inverse document frequency (fixed buffers from :meth:`fit_idf`, saved and exported
    with the model) and each block (word n-grams, character n-grams) is L2-normalised, as TF-IDF does, so
    long texts do not drown short ones. Train it with an L2 penalty (Adam's coupled ``weight_decay``) and it
    converges towards a regularised logistic regression over these features; the character n-grams are what
    beat the words-only TF-IDF baseline. Uses ``nn.Embedding`` and masked sums (no ``nn.EmbeddingBag``,
    which exports to a slow ONNX ``Loop``); bigram ids are hashed inside ``forward`` from the word ids, so
    the preprocessing stays a plain vocabulary lookup.

    Example:
        >>> model = TfidfNGramClassifier(["<pad>", "<unk>", "good", "film"], classes=2)
        >>> model.fit_idf(torch.tensor([[2, 3], [3, 0]]))
        >>> model(torch.tensor([[2, 3, 0]]), torch.tensor([2])).shape
        torch.Size([1, 2])
    """

    def __init__(self, vocab: Sequence[str], classes: int, buckets: int = 131_071,
                 char_buckets: int = 65_521, chars: bool = True) -> None:
        super().__init__()
        self.buckets = buckets
        self.words = nn.Embedding(len(vocab), classes, padding_idx=0)
        self.bigrams = nn.Embedding(buckets, classes, padding_idx=0)
        self.bias = nn.Parameter(torch.zeros(classes))
        self.register_buffer("word_idf", _unfitted_idf(len(vocab)))
        self.register_buffer("bigram_idf", _unfitted_idf(buckets))
        self.chars = None
        if chars:
            self.register_buffer("char_ids", subword_table(vocab, char_buckets))
            self.register_buffer("char_idf", _unfitted_idf(char_buckets))
            self.chars = nn.Embedding(char_buckets, classes, padding_idx=0)

    def _features(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        # One padding column makes the bigram slice valid for any length, so the exported graph keeps the
        # length dimension dynamic down to one token (id 0 is "no feature" in every table).
        ids = nn.functional.pad(ids, (0, 1))
        both = (ids[:, 1:] != 0) & (ids[:, :-1] != 0)
        bigram_ids = torch.where(both, 1 + (ids[:, :-1] * 100_003 + ids[:, 1:]) % (self.buckets - 1), 0)
        char_ids = self.char_ids[ids].flatten(1).long() if self.chars is not None else None
        return ids, bigram_ids, char_ids

    @torch.no_grad()
    def fit_idf(self, ids: torch.Tensor, rows_at_once: int = 4096) -> None:
        """Set the inverse document frequencies from the training texts' ids, ``(N, L)``, padded with 0
        (scikit-learn's smoothed idf: ``ln((1 + N) / (1 + df)) + 1``).

        Counted ``rows_at_once`` rows at a time: the character n-gram ids of every row at once are 64 x 24
        int64 a row (2.2 GB sampled at 28.8k tweets), and the counts are integers, so the sum is exact."""
        tables = [self.word_idf, self.bigram_idf] + ([self.char_idf] if self.chars is not None else [])
        counts = [torch.zeros(table.numel(), dtype=torch.long) for table in tables]
        for start in range(0, len(ids), rows_at_once):
            for count, features in zip(counts, self._features(ids[start:start + rows_at_once])):
                count += document_frequency(features, count.numel())
        for table, count in zip(tables, counts):
            table.copy_(torch.log((1 + len(ids)) / (1 + count.to(table.dtype))) + 1)
            table[0] = 0.0  # id 0 is "no feature": weight 0, so forward needs no padding mask

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        word_ids, bigram_ids, char_ids = self._features(ids)
        blocks = [((self.words, self.word_idf, word_ids), (self.bigrams, self.bigram_idf, bigram_ids))]
        if self.chars is not None:
            blocks.append(((self.chars, self.char_idf, char_ids),))
        logits = self.bias
        for block in blocks:
            total, norm = 0.0, 0.0
            for weights, idf, features in block:
                weight = idf[features]  # (N, K): idf[0] == 0, so padding adds nothing
                total = total + (weights(features) * weight.unsqueeze(-1)).sum(1)
                norm = norm + weight.square().sum(1, keepdim=True)
            logits = logits + total / norm.clamp(min=1e-12).sqrt()
        return logits


class AdaptiveDepthCNN(nn.Module):
    """A CNN whose depth follows the input resolution: it halves the image until it is at most 7 pixels.

    The loop in ``forward`` is Python control flow on the input's shape (the handbook's example): a 28x28
    image goes through two downsampling blocks, a 56x56 one through three. An exporter must keep that
    behaviour right for every resolution it accepts, or refuse.
    """

    def __init__(self, classes: int = 10, channels: int = 32, max_blocks: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                          nn.MaxPool2d(2)) for _ in range(max_blocks))
        self.head = nn.Linear(channels, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images)
        for block in self.blocks:
            if x.shape[-1] <= 7:
                break
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))
