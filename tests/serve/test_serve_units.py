"""In-process pieces of the server: request schemas and messages, predictors, answers, metrics, config (the
batcher and its rule: tests/serve/test_batching.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from serve_fixtures import SRC, models_dir  # noqa: F401  (a fixture)
from serve_models import (
    DIGIT_LABELS,
    TEXT_LABELS,
    digits_onnx_predictor,
    digits_torch_predictor,
    load_text,
    sentences,
    text_predictor,
)

from torchwork.errors import ConfigError, ModelOutputError
from torchwork.serve import OnnxPredictor, ServeConfig, TorchPredictor
from torchwork.serve.encoding import answer, prediction_fragments
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.schemas import Limits, check_rectangular, request_model, validation_message


# ---------------------------------------------------------------- schemas
def message(model, body: str | bytes) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate_json(body)
    return validation_message(caught.value)


@pytest.mark.parametrize("body, expected", [
    ('{"inputs": [[1, 2, NaN]]}', "inputs[0][2]: Input should be a finite number (got nan)"),
    ('{"inputs": [[1, 2, Infinity]]}', "inputs[0][2]: Input should be a finite number (got inf)"),
    ('{"inputs": [[1, 2, -Infinity]]}', "inputs[0][2]: Input should be a finite number (got -inf)"),
    ('{"inputs": [[1, 2, 1e400]]}', "inputs[0][2]: Input should be a finite number"),
    ('{"inputs": [[1, 2, 1e39]]}', "inputs[0][2]: 1e+39 is outside the range of the model's input type"),
    ('{"inputs": [[1, 2, true]]}', "inputs[0][2]: Input should be a valid number"),
    ('{"inputs": [[1, 2, "3"]]}', "inputs[0][2]: Input should be a valid number"),
    ('{"inputs": [[1, 2]]}', "inputs[0]: List should have at least 3 items"),
    ('{"inputs": [[1, 2, 3, 4]]}', "inputs[0]: List should have at most 3 items"),
    ('{"inputs": [[1, 2, [3]]]}', "inputs[0][2]: Input should be a valid number"),
    ('{"inputs": []}', "inputs: List should have at least 1 item"),
    ('{"inputs": [[1, 2, 3], [1, 2, 3], [1, 2, 3]]}', "inputs: List should have at most 2 items"),
    ('{"inputs": [[1, 2, 3]], "extra": 1}', "extra: Extra inputs are not permitted"),
    ('{}', "inputs: Field required"),
    ('[[1, 2, 3]]', "body: Input should be an object like"),
    ('{"inputs": [[1, 2, 3]', "body: Invalid JSON"),
    ('', "body: Invalid JSON"),
    (b'{"inputs": [[1, 2, 3]]}\xff', "body: Invalid JSON"),
])
def test_tensor_request_errors_name_the_field(body, expected):
    model = request_model("tensor", (3,), "float32", Limits(max_items=2))
    assert expected in message(model, body)


def test_valid_tensor_request_and_integer_dtype_ranges():
    model = request_model("tensor", (2, 2), "float32", Limits())
    assert model.model_validate_json('{"inputs": [[[1, 2.5], [-0.0, 3e38]]]}').inputs == [[[1.0, 2.5], [-0.0, 3e38]]]
    ints = request_model("tensor", (2,), "int64", Limits())
    assert ints.model_validate_json('{"inputs": [[1, -5]]}').inputs == [[1, -5]]
    assert "inputs[0][1]: Input should be a valid integer" in message(ints, '{"inputs": [[1, 2.5]]}')
    assert "inputs[0][0]: " in message(ints, f'{{"inputs": [[{2**64}, 1]]}}')
    uint8 = request_model("tensor", (1,), "uint8", Limits())
    assert "inputs[0][0]: -1 is outside the range" in message(uint8, '{"inputs": [[-1]]}')


def test_text_request_limits():
    model = request_model("text", (), "float32", Limits(max_items=3, max_text_length=10))
    assert model.model_validate_json('{"inputs": ["hello", "\\u00e9t\\u00e9"]}').inputs == ["hello", "été"]
    assert "inputs[0]: String should have at least 1 character" in message(model, '{"inputs": [""]}')
    assert "inputs[1]: String should have at most 10 characters" in message(model, '{"inputs": ["a", "%s"]}' % ("x" * 11))
    assert "inputs[0]: Input should be a valid string" in message(model, '{"inputs": [3]}')
    assert "body: Invalid JSON" in message(model, '{"inputs": ["\\ud800"]}')  # a lone surrogate


def test_many_errors_are_summarized():
    model = request_model("tensor", (8,), "float32", Limits())
    text = message(model, json.dumps({"inputs": [["x"] * 8]}))
    assert text.count("Input should be a valid number") == 5 and text.endswith("and 3 more problem(s)")


def test_free_dimensions_must_be_rectangular():
    assert check_rectangular([[[1, 2], [3, 4]]], (None, None)) is None
    problem = check_rectangular([[[1, 2], [3, 4]], [[1, 2], [3]]], (None, None))
    assert problem.startswith("inputs[1][1]: has shape (1,) but inputs[1][0] has (2,)")
    assert check_rectangular([[1, 2, 3]], (3,)) is None
    schema = request_model("tensor", (None, 2), "float32", Limits(max_free_dim=3)).model_json_schema()
    assert schema["properties"]["inputs"]["items"]["maxItems"] == 3


# ---------------------------------------------------------------- predictors
def test_onnx_and_torch_predictors_agree_on_real_digits(models_dir):  # noqa: F811
    from sklearn.datasets import load_digits

    digits = load_digits()
    items = (digits.data[:200] / 16.0).tolist()
    onnx_rows = np.stack(digits_onnx_predictor(str(models_dir)).predict_batch(items))
    torch_rows = np.stack(digits_torch_predictor(str(models_dir)).predict_batch(items))
    np.testing.assert_allclose(onnx_rows, torch_rows, atol=1e-5)
    np.testing.assert_allclose(onnx_rows.sum(axis=1), 1.0, atol=1e-5)
    assert (onnx_rows.argmax(axis=1) == digits.target[:200]).mean() > 0.9


def test_onnx_predictor_reads_its_input_shape_and_rejects_a_bad_file(models_dir, tmp_path):  # noqa: F811
    predictor = OnnxPredictor(models_dir / "digits.onnx", labels=DIGIT_LABELS)
    assert predictor.item_shape == (64,) and predictor.dtype == "float32" and predictor.kind == "tensor"
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="ONNX Runtime could not load"):
        OnnxPredictor(tmp_path / "broken.onnx")


def test_text_predictor_matches_the_module_and_is_batch_invariant(models_dir):  # noqa: F811
    predictor = text_predictor(str(models_dir))
    texts, labels = sentences(40, seed=3)
    rows = np.stack(predictor.predict_batch(texts))
    one_by_one = np.stack([predictor.predict_batch([t])[0] for t in texts])
    np.testing.assert_allclose(rows, one_by_one, atol=1e-6)  # padding never changes an answer
    model, vocabulary = load_text(models_dir)
    with torch.inference_mode():
        expected = torch.softmax(model(*vocabulary(texts)), dim=1).numpy()
    np.testing.assert_allclose(rows, expected, atol=1e-6)
    assert predictor.labels == TEXT_LABELS and (rows.argmax(axis=1) == np.array(labels)).mean() > 0.9


def test_free_dimension_items_of_different_shapes_run_in_groups():
    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=(1, 2), keepdim=False).unsqueeze(1)

    predictor = TorchPredictor(Mean(), item_shape=(None, None))
    rows = predictor.predict_batch([[[1.0, 3.0]], [[2.0], [4.0], [6.0]], [[5.0, 7.0]]])
    assert [float(r[0]) for r in rows] == [2.0, 4.0, 6.0]
    assert predictor.example_items(2) == [[[0]], [[0]]]


def test_predictor_settings_are_checked():
    with pytest.raises(ConfigError, match="needs preprocess"):
        TorchPredictor(torch.nn.Identity(), kind="text")
    with pytest.raises(ConfigError, match="needs item_shape"):
        TorchPredictor(torch.nn.Identity())
    with pytest.raises(ConfigError, match="distinct"):
        TorchPredictor(torch.nn.Identity(), item_shape=(2,), labels=["a", "a"])
    with pytest.raises(ConfigError, match="dtype"):
        TorchPredictor(torch.nn.Identity(), item_shape=(2,), dtype="complex64")
    with pytest.raises(ConfigError, match="not a predictor"):
        from torchwork.serve import create_app

        create_app(object())


def test_serve_config_is_checked():
    with pytest.raises(ConfigError, match="max_batch_size=0 must be positive"):
        ServeConfig(max_batch_size=0)
    with pytest.raises(ConfigError, match="max_wait_ms"):
        ServeConfig(max_wait_ms=-1)
    for name in ("head_timeout_s", "body_timeout_s", "idle_timeout_s", "max_connections"):
        for value in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ConfigError, match=f"{name}=.* must be positive and finite"):
                ServeConfig(**{name: value})


# ---------------------------------------------------------------- answer encoding
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


def test_settle_heap_freezes_what_is_alive_and_makes_young_collections_rarer():
    code = ("import gc; from torchwork.serve.heap import settle_heap; gc.set_threshold(700, 10, 10); "
            "settle_heap(); first = gc.get_threshold(); gc.set_threshold(50000, 5, 5); settle_heap(); "
            "print(first, gc.get_threshold(), gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SRC)}, check=True).stdout.split("\n")[0]
    # raised to 20,000, never lowered; the generations above keep their setting
    assert out == "(20000, 10, 10) (50000, 5, 5) True"


# ---------------------------------------------------------------- metrics, CLI
def test_metrics_render_prometheus_text():
    metrics = ServerMetrics(16, lambda: 3, lambda: 1)
    metrics.requests.inc("200")
    metrics.requests.inc("422", 2)
    metrics.batch_size.observe(5)
    metrics.latency.observe(0.002)
    text = metrics.render()
    assert 'torchwork_requests_total{status="422"} 2' in text
    assert 'torchwork_batch_size_bucket{le="4"} 0' in text and 'torchwork_batch_size_bucket{le="8"} 1' in text
    assert 'torchwork_batch_size_bucket{le="16"} 1' in text and "torchwork_queue_depth 3" in text
    assert 'torchwork_request_duration_seconds_bucket{le="0.0025"} 1' in text
    assert text.endswith("\n")


def test_cli_help_does_not_import_heavy_modules():
    code = ("import sys; from torchwork.cli import build_parser; build_parser().parse_args(['serve', 'x']); "
            "print(sorted(m for m in ('torch', 'fastapi', 'pydantic', 'onnxruntime', 'uvicorn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)})
    assert out.stdout.strip() == "[]", out.stderr


def test_server_setup_errors_say_what_to_do(tmp_path):
    from torchwork.serve.server import bind, load_predictor

    taken = bind("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1:.*Pick another --port"):
            bind("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    with pytest.raises(ConfigError, match="write it as module:function"):
        load_predictor(str(tmp_path), "no_colon")
    with pytest.raises(ConfigError, match="Check the module is importable"):
        load_predictor(str(tmp_path), "no_such_module_here:build")
    with pytest.raises(ConfigError, match="returned dict, not a predictor"):
        load_predictor("{}", "json:loads")  # json.loads("{}") is a dict


def test_serving_an_artifact_uses_torchwork_deploy(tmp_path):
    from torchwork.deploy import export
    from torchwork.serve import predictor_from_artifact

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    export(model, (torch.randn(2, 4),), tmp_path / "artifact", formats=("onnx",), dynamic_batch=True)
    predictor = predictor_from_artifact(tmp_path / "artifact")
    assert (predictor.kind, predictor.item_shape, predictor.labels, predictor.variant) == ("tensor", (4,), None,
                                                                                          "onnx")
    items = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]]
    rows = predictor.predict_batch(items)
    with torch.no_grad():
        np.testing.assert_allclose(rows, model(torch.tensor(items)).numpy(), atol=1e-5)  # raw outputs, no labels
