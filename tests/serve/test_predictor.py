"""serve/predictor.py: the ONNX and torch predictors agree with the model, item by item."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from serve_models import (
    DIGIT_LABELS,
    TEXT_LABELS,
    digits_onnx_predictor,
    digits_torch_predictor,
    load_text,
    sentences,
    text_predictor,
)

from torchwork.errors import ConfigError
from torchwork.serve import OnnxPredictor, TorchPredictor


def test_onnx_and_torch_predictors_agree_on_real_digits(models_dir):
    from sklearn.datasets import load_digits

    digits = load_digits()
    items = (digits.data[:200] / 16.0).tolist()
    onnx_rows = np.stack(digits_onnx_predictor(str(models_dir)).predict_batch(items))
    torch_rows = np.stack(digits_torch_predictor(str(models_dir)).predict_batch(items))
    np.testing.assert_allclose(onnx_rows, torch_rows, atol=1e-5)
    np.testing.assert_allclose(onnx_rows.sum(axis=1), 1.0, atol=1e-5)
    assert (onnx_rows.argmax(axis=1) == digits.target[:200]).mean() > 0.9


def test_onnx_predictor_reads_its_input_shape_and_rejects_a_bad_file(models_dir, tmp_path):
    predictor = OnnxPredictor(models_dir / "digits.onnx", labels=DIGIT_LABELS)
    assert predictor.item_shape == (64,) and predictor.dtype == "float32" and predictor.kind == "tensor"
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="ONNX Runtime could not load"):
        OnnxPredictor(tmp_path / "broken.onnx")


def test_text_predictor_matches_the_module_and_is_batch_invariant(models_dir):
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


def test_configure_threads_refuses_a_count_past_what_the_machine_runs() -> None:
    from torchwork.errors import ConfigError
    from torchwork.serve import configure_threads

    with pytest.raises(ConfigError, match=r"threads=<an integer of 5001 digits or so> is more than the"):
        configure_threads(10**5000)  # it was set as torch's thread count
