"""Models the recipes train from scratch.

Example:
    >>> import torch
    >>> from torchwork.recipes.models import NGramClassifier
    >>> model = NGramClassifier(vocab_size=100, classes=3, dim=8)
    >>> model(torch.tensor([[5, 6, 7, 0]]), torch.tensor([3])).shape
    torch.Size([1, 3])
"""

from __future__ import annotations

import torch
from torch import nn


class NGramClassifier(nn.Module):
    """fastText-style text classifier: embeddings of words, hashed bigrams and (optionally) trigrams, pooled.

    Pooling is a sum over the real (non-padding) n-grams divided by the square root of their count, the
    neural twin of TF-IDF's L2 normalisation: long texts do not drown short ones. Uses ``nn.Embedding``
    and a masked sum rather than ``nn.EmbeddingBag``, which exports to a slow ONNX ``Loop``. Bigram ids are
    hashed inside ``forward`` from the word ids, so the preprocessing stays a plain vocabulary lookup.
    """

    def __init__(self, vocab_size: int, classes: int, dim: int = 32, buckets: int = 131_071,
                 trigrams: bool = True, hidden: int = 0, dropout: float = 0.5, word_dropout: float = 0.0) -> None:
        super().__init__()
        self.buckets = buckets
        self.word_dropout = word_dropout
        self.words = nn.Embedding(vocab_size, dim, padding_idx=0)
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
        total = (self.words(ids) * real).sum(1)
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
