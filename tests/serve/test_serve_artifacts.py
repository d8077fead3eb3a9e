"""``torchwork serve ARTIFACT_DIR`` on artifacts written by ``torchwork.deploy.export``.

Real artifacts (a text classifier trained on real tweets, a CNN on real digits) served by a real server
process on a free loopback port; answers checked against ``load_artifact(dir)(inputs)`` in-process.

The text artifact's deploy variant is the fastest that passed verification, often ONNX Runtime dynamic INT8,
whose activations are quantized with one scale per *batch*: a text's probabilities then move slightly
(measured: up to 0.006 on these tweets) with the other texts it is batched with. Answers are compared with
that tolerance, and labels wherever the in-process answer is not a near-tie.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_artifacts import (
    DIGIT_LABELS,
    STATIC_BATCH,
    STATIC_LENGTH,
    DigitsArtifact,
    TextArtifact,
    build_static_batch_artifact,
    build_static_length_artifact,
    digits,
    shared_digits_artifact,
    shared_text_artifact,
)
from serve_fixtures import ServerProcess, metric_value, parallel, probabilities

from torchwork.deploy import load_artifact, read_manifest
from torchwork.errors import ConfigError, ExportError, ServeError
from torchwork.recipes.serve_demo import serve_and_ask
from torchwork.serve import ArtifactPredictor, predictor_from_artifact

INT8_ATOL = 0.02  # batch-neighbour effect of dynamic INT8 (see the module docstring), with a margin


@pytest.fixture(scope="module")
def text_artifact() -> TextArtifact:
    return shared_text_artifact()


@pytest.fixture(scope="module")
def digits_artifact() -> DigitsArtifact:
    return shared_digits_artifact()


def _serve(path: Path, log_dir: Path, *flags: str) -> Iterator[ServerProcess]:
    server = ServerProcess(path, None, *flags, log_dir=log_dir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def text_server(text_artifact: TextArtifact, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _serve(text_artifact.path, tmp_path_factory.mktemp("logs"), "--max-items", "8",
                      "--max-text-length", "280")


@pytest.fixture(scope="module")
def digits_server(digits_artifact: DigitsArtifact, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ServerProcess]:
    yield from _serve(digits_artifact.path, tmp_path_factory.mktemp("logs"), "--max-items", "8", "--docs")


def assert_close_to_in_process(rows: np.ndarray, expected: np.ndarray, atol: float) -> None:
    """Probabilities within ``atol``; the same label wherever the expected answer is not a near-tie."""
    np.testing.assert_allclose(rows, expected, atol=atol)
    top_two = np.sort(expected, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * atol
    assert (rows.argmax(1) == expected.argmax(1))[clear].all()


# ---------------------------------------------------------------- the text artifact
def test_a_text_artifact_is_served_from_its_manifest(text_artifact):
    manifest = read_manifest(text_artifact.path)
    predictor = predictor_from_artifact(text_artifact.path)
    assert isinstance(predictor, ArtifactPredictor)
    assert (predictor.kind, predictor.item_shape, predictor.labels) == ("text", (), text_artifact.classes)
    assert predictor.variant == manifest.deploy  # verify chose it (INT8 or not: timing decides)
    assert predictor.static_batch is None and predictor.output == "probabilities"  # softmax in the artifact
    tweets = text_artifact.tweets[:40]
    rows = np.asarray(predictor.predict_batch(tweets))
    np.testing.assert_allclose(rows, load_artifact(text_artifact.path)(tweets).numpy(), atol=1e-6)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-5)
    # another variant on request: the same answers as that variant in-process
    pt2 = predictor_from_artifact(text_artifact.path, "pt2")
    np.testing.assert_allclose(np.asarray(pt2.predict_batch(tweets)),
                               load_artifact(text_artifact.path, "pt2")(tweets).numpy(), atol=1e-6)


def test_concurrent_real_tweets_answer_200_and_match_in_process(text_server, text_artifact):
    tweets = text_artifact.tweets
    requests = [tweets[i:i + 1 + i % 3] for i in range(0, 96, 2)]  # 48 requests of 1 to 3 tweets
    results = parallel(lambda inputs: text_server.predict(inputs), requests, workers=16)
    local = load_artifact(text_artifact.path)
    for inputs, (status, _, body) in zip(requests, results):
        assert status == 200, body
        rows = np.array([probabilities(p, text_artifact.classes) for p in body["predictions"]])
        assert_close_to_in_process(rows, local(inputs).numpy(), INT8_ATOL)
    metrics = text_server.metrics()
    assert metric_value(metrics, 'torchwork_requests_total{status="200"}') >= len(requests)
    assert metric_value(metrics, "torchwork_batch_size_sum") >= sum(len(r) for r in requests)


def test_texts_without_words_are_answered_and_an_empty_text_is_a_clear_422(text_server, text_artifact):
    wordless = ["   ", "?!...", "\n\t", "🙂🙂🙂", "@@@ ### !!!", "\ufeff", "\u0000", "a"]
    status, _, body = text_server.predict(wordless)
    assert status == 200, body
    rows = np.array([probabilities(p, text_artifact.classes) for p in body["predictions"]])
    assert_close_to_in_process(rows, load_artifact(text_artifact.path)(wordless).numpy(), INT8_ATOL)
    for inputs, field in [([""], "inputs[0]"), (["fine", ""], "inputs[1]")]:
        status, _, body = text_server.predict(inputs)
        assert status == 422 and body["detail"] == f"{field}: String should have at least 1 character", body
    # a lone surrogate cannot become a Python text: the JSON parser refuses it before the model sees it
    status, _, body = text_server.request("POST", "/predict", b'{"inputs": ["\\ud800 lone", "ok"]}')
    assert status == 422 and body["detail"].startswith("body: Invalid JSON"), body
    assert text_server.request("GET", "/healthz")[0] == 200


def test_no_docs_schema_or_redirects_unless_asked_for(text_server):
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert text_server.request("GET", path)[0] == 404, path
    status, headers, _ = text_server.request("GET", "/readyz/", headers={"Host": "evil.example"})
    assert status == 404 and "location" not in headers  # no redirect built from the Host header
    assert "docs at" not in text_server.lines[-1]


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=4))
def test_any_text_gets_a_probability_row(text_predictor, texts):
    rows = np.asarray(text_predictor.predict_batch(texts))
    assert rows.shape == (len(texts), 3) and np.isfinite(rows).all()
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-5)


@pytest.fixture(scope="module")
def text_predictor(text_artifact: TextArtifact) -> ArtifactPredictor:
    return predictor_from_artifact(text_artifact.path)


# ---------------------------------------------------------------- the tensor artifact
def test_a_tensor_artifact_takes_images_of_its_static_shape(digits_artifact):
    predictor = predictor_from_artifact(digits_artifact.path)
    assert (predictor.kind, predictor.item_shape, predictor.dtype) == ("tensor", (1, 8, 8), "float32")
    assert predictor.labels == DIGIT_LABELS and predictor.output == "logits"  # exported without softmax
    images = digits_artifact.images[:20]
    expected = torch.softmax(load_artifact(digits_artifact.path)(torch.from_numpy(images)), dim=-1).numpy()
    np.testing.assert_allclose(np.asarray(predictor.predict_batch(images.tolist())), expected, atol=1e-6)


@pytest.mark.slow(reason="concurrent clients against a real server, every answer compared in process")
def test_concurrent_digit_images_answer_200_and_match_in_process(digits_server, digits_artifact):
    images = digits_artifact.images[:80]
    requests = [list(range(i, i + 1 + i % 2)) for i in range(0, 80, 2)]
    results = parallel(lambda rows: digits_server.predict(images[rows].tolist()), requests, workers=16)
    logits = load_artifact(digits_artifact.path)(torch.from_numpy(images))
    expected = torch.softmax(logits, dim=-1).numpy()
    for rows, (status, _, body) in zip(requests, results):
        assert status == 200, body
        got = np.array([probabilities(p, DIGIT_LABELS) for p in body["predictions"]])
        np.testing.assert_allclose(got, expected[rows], atol=1e-5)


def test_other_shapes_get_a_422_naming_the_field(digits_server, digits_artifact):
    image = digits_artifact.images[0].tolist()  # [[8 numbers] x 8] in one channel
    cases = [
        ([image[0][:-1] + image[0][1:]], "inputs[1][0]: List should have at most 8 items"),  # 1 x 14 x 8
        ([[row + [0.0] for row in image[0]]], "inputs[1][0][0]: List should have at most 8 items"),  # 1x8x9
        ([[row[:7] for row in image[0]]], "inputs[1][0][0]: List should have at least 8 items"),  # 1x8x7
        (image + image, "inputs[1]: List should have at most 1 item"),  # two channels
        (image[0], "inputs[1]: List should have at most 1 item"),  # 8 x 8, no channel dimension
        ([[float(x) for x in range(64)]], "inputs[1][0]: List should have at most 8 items"),  # flat pixels
    ]
    for item, words in cases:
        status, _, body = digits_server.predict([digits_artifact.images[1].tolist(), item])
        assert status == 422 and words in body["detail"], (words, body)
    schema = digits_server.request("GET", "/openapi.json")[2]
    body_schema = schema["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "shape (1, 8, 8) (float32)" in body_schema["properties"]["inputs"]["description"]
    assert digits_server.predict([image])[0] == 200


def test_a_static_batch_runs_in_full_chunks_for_any_number_of_items(tmp_path):
    model = build_static_batch_artifact(tmp_path / "static-batch")
    predictor = predictor_from_artifact(tmp_path / "static-batch")
    assert predictor.static_batch == STATIC_BATCH and predictor.item_shape == (64,)
    pixels = digits()[0][:11].flatten(1)
    with torch.no_grad():
        expected = torch.softmax(model(pixels), dim=-1).numpy()
    for count in (1, 3, STATIC_BATCH, 9, 11):
        rows = np.asarray(predictor.predict_batch(pixels[:count].tolist()))
        np.testing.assert_allclose(rows, expected[:count], atol=1e-6)


def test_a_static_text_length_is_met_by_cutting_and_padding(tmp_path, text_artifact):
    model, pre = build_static_length_artifact(tmp_path / "static-length", text_artifact.tweets)
    assert read_manifest(tmp_path / "static-length").inputs[0].shape == ["batch", STATIC_LENGTH]
    predictor = predictor_from_artifact(tmp_path / "static-length")
    texts = ["ok", "a much longer tweet than six tokens, so it is cut to its first six", *text_artifact.tweets[:6]]
    ids, lengths = pre(texts, max_length=STATIC_LENGTH)
    ids = torch.nn.functional.pad(ids, (0, STATIC_LENGTH - ids.shape[1]))
    with torch.no_grad():
        expected = torch.softmax(model(ids, lengths), dim=-1).numpy()
    np.testing.assert_allclose(np.asarray(predictor.predict_batch(texts)), expected, atol=1e-6)
    np.testing.assert_allclose(np.asarray(predictor.predict_batch(texts[:1])), expected[:1], atol=1e-6)


# ---------------------------------------------------------------- artifacts the server refuses
def _edited_copy(source: Path, target: Path, **changes) -> Path:
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest.update(changes)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def test_untrusted_or_unservable_artifacts_are_refused_with_the_reason(tmp_path, text_artifact):
    foreign = _edited_copy(text_artifact.path, tmp_path / "foreign",
                           preprocess={"class": "os:system", "dir": "preprocess"})
    with pytest.raises(ExportError, match="'os:system' is outside the torchwork namespace.*--factory"):
        predictor_from_artifact(foreign)
    two_inputs = _edited_copy(text_artifact.path, tmp_path / "two-inputs", preprocess=None)
    with pytest.raises(ConfigError, match=r"takes 2 inputs \['ids', 'lengths'\].*no preprocessing"):
        predictor_from_artifact(two_inputs)
    with pytest.raises(ConfigError, match="has no 'torchscript' variant"):
        predictor_from_artifact(text_artifact.path, "torchscript")
    damaged = _edited_copy(text_artifact.path, tmp_path / "damaged")
    (damaged / "model.int8.onnx").write_bytes(b"not a model")
    with pytest.raises(ExportError, match="damaged.*model.int8.onnx"):
        predictor_from_artifact(damaged)


def test_an_artifact_whose_output_width_is_not_its_labels_is_refused_at_load(tmp_path, digits_artifact):
    five = _edited_copy(digits_artifact.path, tmp_path / "five-labels",
                        postprocess={"softmax": False, "labels": DIGIT_LABELS[:5]})
    with pytest.raises(ExportError, match=r"variant '(pt2|onnx)' \(model\.(pt2|onnx)\) answers 10 values per item "
                                          "for the 5 labels the manifest names"):
        predictor_from_artifact(five)


# ---------------------------------------------------------------- the recipe's demo client
def children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def test_serve_and_ask_prints_each_answer_and_stops_the_server(text_artifact, capsys):
    texts = [*text_artifact.tweets[:5], "!!!"]
    before = children()
    answers = serve_and_ask(text_artifact.path, texts, threads=1)
    assert [a["text"] for a in answers] == texts
    rows = np.array([probabilities({k: a[k] for k in ("label", "probabilities")}, text_artifact.classes)
                     for a in answers])
    assert_close_to_in_process(rows, load_artifact(text_artifact.path)(texts).numpy(), INT8_ATOL)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"serving {text_artifact.path} at http://127.0.0.1:")
    for line, answer in zip(printed[1:], answers):
        assert line.split()[0] == answer["label"] and f"{answer['label']} " in line
    assert children() == before  # the server is gone


def test_serve_and_ask_says_why_a_server_did_not_start(tmp_path, text_artifact):
    damaged = _edited_copy(text_artifact.path, tmp_path / "damaged")
    (damaged / "model.int8.onnx").write_bytes(b"not a model")
    before = children()
    with pytest.raises(ServeError, match=r"(?s)exited with code 2 while starting.*damaged: model.int8.onnx"):
        serve_and_ask(damaged, ["hello"], timeout_s=60)
    with pytest.raises(ConfigError, match="non-empty list of texts"):
        serve_and_ask(text_artifact.path, [])
    assert children() == before
