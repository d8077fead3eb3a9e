"""Which model ``torchwork fit`` serves: the one it trained, only if it beats the TF-IDF baseline by more
than the noise of the test split (the 95% paired-bootstrap interval of the macro-F1 difference lies above
0); otherwise it says so plainly and serves the n-gram model (TF-IDF-weighted n-grams and one linear layer:
the baseline's kind of model, exportable) in the transformer's place.

Example:
    >>> served = {"name": "ngram", "test_probabilities": [[0.9, 0.1], [0.2, 0.8]] * 100}
    >>> choice = choose_served(served, lambda: served, [0, 1] * 100, [0, 1] * 100, ["a", "b"], 0, print)
    the ngram model's test macro-F1 1.0000 against the baseline's 1.0000: +0.0000 (95% interval +0.0000 to +0.0000): not beyond the noise
    >>> choice["against_baseline"]["beats"]
    False
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def against_baseline(probabilities: Any, baseline_predictions: Any, labels: Sequence[int], classes: Sequence[str],
                     seed: int) -> dict[str, Any]:
    """The model's and the baseline's macro-F1 with the interval of their difference, and ``beats``."""
    from torchwork.data.intervals import paired_macro_f1

    predictions = np.asarray(probabilities).argmax(axis=-1)
    comparison = paired_macro_f1(labels, predictions, np.asarray(baseline_predictions), len(classes), seed=seed)
    comparison["beats"] = bool(comparison["difference"]["low"] > 0)
    return comparison


def _words(name: str, comparison: dict[str, Any]) -> str:
    difference = comparison["difference"]
    verdict = ("beats it beyond the noise" if comparison["beats"] else
               "worse than the baseline beyond the noise" if difference["high"] < 0 else "not beyond the noise")
    return (f"the {name} model's test macro-F1 {comparison['a']['macro_f1']:.4f} against the baseline's "
            f"{comparison['b']['macro_f1']:.4f}: {difference['value']:+.4f} (95% interval {difference['low']:+.4f} "
            f"to {difference['high']:+.4f}): {verdict}")


def choose_served(served: dict[str, Any], served_ngram: Callable[[], dict[str, Any]], baseline_predictions: Any,
                  labels: Sequence[int], classes: Sequence[str], seed: int, say: Callable[[str], Any]
                  ) -> dict[str, Any]:
    """``served``, or (a transformer that does not beat the baseline beyond the noise) the n-gram model's
    export; ``against_baseline`` records the comparison and the reason either way."""
    comparison = against_baseline(served["test_probabilities"], baseline_predictions, labels, classes, seed)
    say(_words(served["name"], comparison))
    if not comparison["beats"] and served["name"] == "transformer":
        say("the transformer is not served: it does not beat TF-IDF by more than the test split's noise. "
            "Serving the n-gram model (the baseline's kind of model, exportable) instead.")
        rejected = comparison
        served = served_ngram()
        comparison = against_baseline(served["test_probabilities"], baseline_predictions, labels, classes, seed)
        comparison["instead_of"] = {"model": "transformer", **rejected}
        say(_words("ngram", comparison))
    if comparison["difference"]["high"] < 0:  # served all the same: TF-IDF's scikit-learn pipeline is no artifact
        say(f"warning: the served {served['name']} model scores below the TF-IDF baseline beyond the noise on this "
            "data (the baseline's scikit-learn pipeline is not exported): see the report's learning curves; more "
            "epochs (--set epochs=N) or more rows may help.")
    comparison["reason"] = _words(served["name"], comparison)
    served["against_baseline"] = comparison
    return served
