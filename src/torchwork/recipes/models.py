"""Models the recipes train from scratch.

Example:
    >>> import torch
    >>> from torchwork.recipes.models import NGramClassifier
    >>> model = NGramClassifier(vocab_size=100, classes=3, dim=8)
    >>> model(torch.tensor([[5, 6, 7, 0]]), torch.tensor([3])).shape
    torch.Size([1, 3])
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
    return torch.tensor(rows, dtype=torch.long)


class NGramClassifier(nn.Module):
    """fastText-style text classifier: embeddings of words (plus their character n-grams when ``vocab`` is
    given), hashed bigrams and (optionally) trigrams, pooled.

    Pooling is a sum over the real (non-padding) n-grams divided by the square root of their count, the
    neural twin of TF-IDF's L2 normalisation: long texts do not drown short ones. Uses ``nn.Embedding``
    and a masked sum rather than ``nn.EmbeddingBag``, which exports to a slow ONNX ``Loop``. Bigram ids are
    hashed inside ``forward`` from the word ids, so the preprocessing stays a plain vocabulary lookup.
    """

    def __init__(self, vocab_size: int, classes: int, dim: int = 32, buckets: int = 131_071,
                 trigrams: bool = True, hidden: int = 0, dropout: float = 0.5, word_dropout: float = 0.0,
                 vocab: Sequence[str] | None = None, subword_buckets: int = 65_521) -> None:
        super().__init__()
        self.buckets = buckets
        self.word_dropout = word_dropout
        self.words = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.subwords = None
        if vocab is not None:  # words also get the mean of their character n-grams (typos, inflections)
            if len(vocab) != vocab_size:
                raise ValueError(f"vocab has {len(vocab)} words but vocab_size is {vocab_size}.")
            self.register_buffer("subword_ids", subword_table(vocab, subword_buckets))
            self.subwords = nn.Embedding(subword_buckets, dim, padding_idx=0)
        self.bigrams = nn.Embedding(buckets, dim)
        self.trigrams = nn.Embedding(buckets, dim) if trigrams else None
        self.dropout = nn.Dropout(dropout)
        self.head: nn.Module = (nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, classes))
                                if hidden else nn.Linear(dim, classes))

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # Two padding columns make every n-gram slice valid for any length, so the exported graph keeps
        # the length dimension dynamic down to one token (padding id 0 adds nothing).
        ids = nn.functional.pad(ids, (0, 2))
        if self.training and self.word_dropout > 0:
            # drop whole words (as if unseen): a bag-of-n-grams model then cannot lean on a few of them
            ids = ids * (torch.rand(ids.shape, device=ids.device) >= self.word_dropout)
        real = (ids != 0).unsqueeze(-1).to(self.words.weight.dtype)  # padding id is 0
        vectors = self.words(ids)
        if self.subwords is not None:
            grams = self.subword_ids[ids]  # (N, L, G)
            present = (grams != 0).unsqueeze(-1).to(vectors.dtype)
            vectors = vectors + (self.subwords(grams) * present).sum(2) / present.sum(2).clamp(min=1)
        total = (vectors * real).sum(1)
        count = real.sum(1)
        # n-gram masks and hashes are computed for every length; a text shorter than n adds nothing.
        both = real[:, 1:] * real[:, :-1]
        bigram_ids = (ids[:, :-1] * 100_003 + ids[:, 1:]) % self.buckets
        total = total + (self.bigrams(bigram_ids) * both).sum(1)
        count = count + both.sum(1)
        if self.trigrams is not None:
            three = both[:, 1:] * real[:, :-2]
            trigram_ids = ((ids[:, :-2] * 100_003 + ids[:, 1:-1]) * 1_009 + ids[:, 2:]) % self.buckets
            total = total + (self.trigrams(trigram_ids) * three).sum(1)
            count = count + three.sum(1)
        return self.head(self.dropout(total / count.clamp(min=1).sqrt()))


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
