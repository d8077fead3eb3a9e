"""Rows whose label a cross-validated baseline is confident is wrong: the candidates for a relabel.

Each row is scored by a TF-IDF + logistic-regression model that never saw it (``folds``-fold out-of-fold
probabilities). A row labelled ``y`` is a candidate when another class ``k`` gets a probability above that
class's own threshold (the mean probability of ``k`` among the rows labelled ``k``) and above the
probability of ``y``: the per-class threshold rule of confident learning (Northcutt, Jiang and Chuang,
"Confident Learning: Estimating Uncertainty in Dataset Labels", JAIR 2021), written here for one model's
out-of-fold scores. A row is a candidate too when ``y`` gets less than half a blind guess (``1 / (2 *
classes)``): with three classes the rule misses rows whose probability is split between the two others.
Candidates are ranked by self-confidence, the out-of-fold probability of the given label, lowest first (the
default ranking of cleanlab's ``find_label_issues``). With two classes the order is the margin's, ``p(k) -
p(y)``, and the bound added no row on Rotten Tomatoes; on 38k tweets with 5% of labels flipped the two
raise the planted flips among the top 5% from 0.427 to 0.471, among all candidates from 0.248 to 0.256,
and the flips listed from 0.60 to 0.70 (``benchmarks/data_report.py``).

The precision of that list is bounded by the baseline's accuracy more than by the ranking: on Rotten
Tomatoes (76% accurate) most of the top candidates that are not planted flips are reviews a bag of words
misreads ("the script has problems, but the actors pick up the slack"), not wrong labels. Word + character
n-grams, MiniLM sentence embeddings and their ensembles gained about 4 points (benchmarks/RESULTS.md).

Linear in the rows (sparse TF-IDF, a linear model per fold): about 10 s for 30k short texts on 2 cores.

Example:
    >>> from torchwork.data.label_noise import label_noise_candidates
    >>> texts = ["good fine great"] * 20 + ["bad awful poor"] * 20
    >>> labels = ["pos"] * 19 + ["neg"] + ["neg"] * 20
    >>> [(c.index, c.given, c.suggested) for c in label_noise_candidates(texts, labels)][:1]
    [(19, 'neg', 'pos')]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from torchwork.errors import ConfigError, DataError
from torchwork.finite import check_count
from torchwork.seeding import check_seed

# Each fold fits one model on all the other rows, so the time grows with the folds: 100 is 20 times the
# default of 5 (minutes on 30k texts), and more folds than the smallest class has rows are cut to that.
MAX_FOLDS = 100


@dataclasses.dataclass(frozen=True)
class NoiseCandidate:
    """Row ``index`` is labelled ``given``; the baseline says ``suggested`` with ``confidence``."""

    index: int
    given: str
    suggested: str
    confidence: float
    given_probability: float

    @property
    def margin(self) -> float:
        return self.confidence - self.given_probability


def _check_settings(texts: Sequence[str], labels: Sequence[str], folds: int, seed: int) -> int:
    """``folds`` as an int when it is one in ``[2, MAX_FOLDS]``, ``seed`` is a seed and there is one label per
    text; else a ConfigError, before any text is read."""
    folds = check_count(folds, "folds", 2, MAX_FOLDS, " (cross-validation folds; 5 is the default, and more "
                        "than the smallest class's rows are cut to that)")
    check_seed(seed)
    if len(labels) != len(texts):
        raise ConfigError(f"labels has {len(labels):,} entries for {len(texts):,} texts: pass one label per "
                          "text, in the same order.")
    return folds


def out_of_fold_probabilities(texts: Sequence[str], labels: Sequence[str], *, folds: int = 5,
                              seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """``(probabilities, classes)``: each row's class probabilities from a model trained on the other folds."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from threadpoolctl import threadpool_limits

    folds = _check_settings(texts, labels, folds, seed)
    classes = sorted(set(labels))
    y = np.array([classes.index(label) for label in labels])
    smallest = int(np.bincount(y).min())
    folds = max(2, min(folds, smallest))
    try:
        features = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, max_features=200_000,
                                   dtype=np.float32).fit_transform(texts)
    except ValueError:  # scikit-learn's "empty vocabulary" / "no terms remain": a traceback before
        raise DataError("no word appears in two of the texts (empty, one character, or all different): there "
                        "is nothing to cross-validate a baseline on. Is it the text column? (--text COL)") from None
    probabilities = np.zeros((len(y), len(classes)), dtype=np.float64)
    # One BLAS thread: lbfgs makes many small calls, which two threads slow down (all 38k tweets: 50-62 s on 2
    # threads against 18.6 s on one, measured on this 2-core machine).
    with threadpool_limits(limits=1, user_api="blas"):
        for train, held_out in StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
            model = LogisticRegression(C=1.0, max_iter=300).fit(features[train], y[train])
            probabilities[np.ix_(held_out, model.classes_)] = model.predict_proba(features[held_out])
    return probabilities, classes


def label_noise_candidates(texts: Sequence[str], labels: Sequence[str], *, folds: int = 5,
                           seed: int = 0) -> list[NoiseCandidate]:
    """The rows a cross-validated baseline is confident are mislabelled, the least probable given label first
    (see the module).

    Classes with fewer than 2 rows cannot be cross-validated; with them, or with one class, it returns [].
    """
    return label_noise_scan(texts, labels, folds=folds, seed=seed)[0]


def label_noise_scan(texts: Sequence[str], labels: Sequence[str], *, folds: int = 5,
                     seed: int = 0) -> tuple[list[NoiseCandidate], float | None]:
    """The candidates (see :func:`label_noise_candidates`) and how often the out-of-fold baseline agrees with
    the labels (:func:`baseline_agreement`; None, with no candidates, when the labels cannot be
    cross-validated)."""
    _check_settings(texts, labels, folds, seed)
    if not cross_validatable(labels):
        return [], None
    try:
        probabilities, classes = out_of_fold_probabilities(texts, labels, folds=folds, seed=seed)
    except DataError:  # no shared word: the report's empty-text and empty-split findings say what is wrong
        return [], None
    return (candidates_from_probabilities(probabilities, classes, labels),
            baseline_agreement(probabilities, classes, labels))


def cross_validatable(labels: Sequence[str]) -> bool:
    """Two classes or more, each of two rows or more: what the out-of-fold baseline needs."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return len(counts) >= 2 and min(counts.values()) >= 2


def candidates_from_probabilities(probabilities: np.ndarray, classes: Sequence[str],
                                  labels: Sequence[str]) -> list[NoiseCandidate]:
    """The candidates among rows scored by ``probabilities`` (one row of class probabilities per label, never
    from a model that saw the row), the least probable given label first (the rule: see the module).

    Example:
        >>> import numpy as np
        >>> scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.95, 0.05]])
        >>> [(c.index, c.suggested) for c in candidates_from_probabilities(scores, ["neg", "pos"], ["neg", "neg", "neg"])]
        [(1, 'pos')]
    """
    given = np.array([list(classes).index(label) for label in labels])
    thresholds = np.array([probabilities[given == k, k].mean() if np.any(given == k) else 1.0
                           for k in range(len(classes))])
    index = np.arange(len(given))
    own = probabilities[index, given]
    others = probabilities.copy()
    others[index, given] = -1.0
    above = np.where(others >= thresholds, others, -1.0)
    confident = above.max(axis=1) > own
    best = np.where(confident, above.argmax(axis=1), others.argmax(axis=1))
    rows = np.flatnonzero(confident | (own < 0.5 / len(classes)))
    order = rows[np.argsort(own[rows], kind="stable")]
    return [NoiseCandidate(int(i), classes[given[i]], classes[best[i]], float(probabilities[i, best[i]]),
                           float(own[i])) for i in order]


def baseline_agreement(probabilities: np.ndarray, classes: Sequence[str], labels: Sequence[str]) -> float:
    """The share of rows whose label is the out-of-fold baseline's most probable class: how far its doubts
    can be trusted (the top of the candidate list is about as precise as the baseline is right on the texts
    it is surest of: docs/design/label-noise.md).

    Example:
        >>> import numpy as np
        >>> baseline_agreement(np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]]), ["a", "b"], ["a", "b", "b"])
        0.6666666666666666
    """
    given = np.array([list(classes).index(label) for label in labels])
    return float(np.mean(probabilities.argmax(axis=1) == given))
