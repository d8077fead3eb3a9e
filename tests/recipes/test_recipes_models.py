"""The sentiment model: TF-IDF weighting learned end to end, checked against scikit-learn and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.feature_extraction.text import TfidfVectorizer

from torchwork.recipes.models import TfidfNGramClassifier, document_frequency, subword_table

TEXTS = ["good film", "bad film", "good good plot", "bad plot twist", "film"]


def _ids(texts: list[str], vocab: list[str]) -> torch.Tensor:
    index = {word: i for i, word in enumerate(vocab)}
    width = max(len(t.split()) for t in texts)
    return torch.tensor([[index[w] for w in t.split()] + [0] * (width - len(t.split())) for t in texts])


@pytest.fixture
def vocab() -> list[str]:
    return ["<pad>", "<unk>", *sorted({w for t in TEXTS for w in t.split()})]


def test_document_frequency_counts_each_row_once():
    ids = torch.tensor([[4, 4, 4, 0], [4, 2, 0, 0], [0, 0, 0, 0], [3, 2, 4, 1]])
    expected = [sum(1 for row in ids.tolist() if i in row) for i in range(5)]
    expected[0] = 0  # padding is never a feature
    assert document_frequency(ids, 5).tolist() == expected


def test_word_idf_matches_scikit_learn(vocab):
    model = TfidfNGramClassifier(vocab, classes=2, chars=False)
    model.fit_idf(_ids(TEXTS, vocab))
    sklearn = TfidfVectorizer(smooth_idf=True).fit(TEXTS)
    for word, column in sklearn.vocabulary_.items():
        assert model.word_idf[vocab.index(word)].item() == pytest.approx(sklearn.idf_[column], rel=1e-6)


def test_idf_counted_a_few_rows_at_a_time_equals_all_rows_at_once(vocab):
    ids = _ids(TEXTS * 3, vocab)
    at_once, in_chunks = (TfidfNGramClassifier(vocab, classes=2, buckets=97, char_buckets=89) for _ in range(2))
    at_once.fit_idf(ids, rows_at_once=len(ids))
    in_chunks.fit_idf(ids, rows_at_once=2)  # 15 rows: 7 chunks of 2 and one of 1
    for name in ("word_idf", "bigram_idf", "char_idf"):
        assert torch.equal(getattr(at_once, name), getattr(in_chunks, name)), name
    assert (at_once.char_idf[1:] != 1.0).any()  # fitted, not the unfitted table of ones


def test_forward_is_a_linear_model_over_l2_normalised_tfidf(vocab):
    torch.manual_seed(0)
    model = TfidfNGramClassifier(vocab, classes=3, buckets=97, chars=False)
    model.fit_idf(_ids(TEXTS, vocab))
    torch.nn.init.normal_(model.bias)
    ids = _ids(["good good plot"], vocab)
    words = ids[0].tolist()
    bigrams = [1 + (a * 100_003 + b) % 96 for a, b in zip(words, words[1:])]
    weights = [model.word_idf[w].item() for w in words] + [model.bigram_idf[b].item() for b in bigrams]
    rows = [model.words.weight[w] for w in words] + [model.bigrams.weight[b] for b in bigrams]
    norm = math.sqrt(sum(w * w for w in weights))
    expected = model.bias + sum(w * row for w, row in zip(weights, rows)) / norm
    torch.testing.assert_close(model(ids, torch.tensor([3])), expected.unsqueeze(0))
    # padding changes nothing: the same text in a wider batch gives the same logits
    wide = torch.nn.functional.pad(ids, (0, 4))
    torch.testing.assert_close(model(wide, torch.tensor([3])), model(ids, torch.tensor([3])))


def test_character_ngrams_tie_typos_to_words(vocab):
    table = subword_table([*vocab, "fiml", "films"], buckets=1_009)
    grams = [set(row[row != 0].tolist()) for row in table]
    film, typo, plural = grams[vocab.index("film")], grams[-2], grams[-1]
    assert film & plural and len(film & plural) > len(film & typo) >= 0
    assert not grams[0] and not grams[1]  # <pad> and <unk> have none
    model = TfidfNGramClassifier([*vocab, "fiml"], classes=2)
    model.fit_idf(_ids(TEXTS, vocab))
    ids = torch.tensor([[len(vocab)]])  # a word seen only through its character n-grams still scores
    with torch.no_grad():
        model.chars.weight.fill_(1.0)
    assert torch.all(model(ids, torch.tensor([1])) > 0)


def test_one_token_texts_and_batches_of_one(vocab):
    model = TfidfNGramClassifier(vocab, classes=2)
    model.fit_idf(_ids(TEXTS, vocab))
    out = model(torch.tensor([[vocab.index("film")]]), torch.tensor([1]))
    assert out.shape == (1, 2) and np.isfinite(out.detach().numpy()).all()
    empty = model(torch.zeros(1, 3, dtype=torch.long), torch.tensor([1]))  # all padding: the bias alone
    torch.testing.assert_close(empty, model.bias.unsqueeze(0))
