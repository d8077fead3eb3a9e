"""serve/encoding.py: an answer is the JSON of each prediction, value for value."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchwork.errors import ModelOutputError
from torchwork.serve.encoding import answer, prediction_fragments

LABELS = ["negative", 'a "quoted" label', "ünïcode"]
_values = st.one_of(st.floats(width=32), st.sampled_from([0.0, -0.0, 1e-45, float("nan"), float("inf")]))


@given(st.lists(st.lists(_values, min_size=3, max_size=3), min_size=1, max_size=6), st.booleans())
@settings(max_examples=300, deadline=None)
def test_answers_are_the_json_of_each_prediction(rows, with_labels):
    array = np.array(rows, dtype=np.float32)
    labels = LABELS if with_labels else None
    status, body = answer(prediction_fragments(labels)(array))
    bad = [i for i, row in enumerate(array) if not np.isfinite(row).all()]
    if bad:  # the first item that cannot be answered is named
        assert status == 422 and json.loads(body)["detail"].startswith(f"inputs[{bad[0]}]: the model's output")
        return
    if labels:
        expected = [{"label": labels[int(row.argmax())], "probabilities": dict(zip(labels, row.tolist()))}
                    for row in array]
    else:
        expected = [{"output": row.tolist()} for row in array]
    # The same JSON, value for value: re-written by json.dumps, -0.0 and every float's digits included.
    assert status == 200 and json.dumps(json.loads(body)) == json.dumps({"predictions": expected})


def test_outputs_of_the_wrong_shape_for_the_labels_are_refused():
    with pytest.raises(ModelOutputError, match=r"probabilities of shape \(2,\) for 3 labels"):
        prediction_fragments(LABELS)(np.zeros((4, 2)))
    ragged = [np.zeros(2), np.zeros(3)]  # outputs of free-dimension items need not stack
    assert answer(prediction_fragments(None)(ragged)) == (200, b'{"predictions":[{"output":[0.0,0.0]},'
                                                               b'{"output":[0.0,0.0,0.0]}]}')
