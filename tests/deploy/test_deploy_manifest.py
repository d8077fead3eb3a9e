"""The typed manifest (data from disk, validated on read) and the runtime's rules, without an export."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from torchwork.deploy.manifest import Manifest, TensorSpec, read_manifest
from torchwork.deploy.runtime import check_row_count, run_in_chunks, softmax
from torchwork.errors import ExportError, ModelOutputError

GOOD = {"torchwork_artifact": 1, "files": {"model.onnx": {"bytes": 5, "sha256": "0" * 64}},
        "inputs": [{"name": "x", "dtype": "float32", "shape": ["batch", 4]}],
        "outputs": [{"name": "output", "dtype": "float32", "shape": ["batch", 2]}],
        "variants": {"onnx": {"file": "model.onnx", "extra_files": [], "format": "onnx", "opset": 18}},
        "postprocess": {"softmax": True, "labels": ["no", "yes"]}, "deploy": "onnx", "preprocess": None}


def test_a_manifest_reads_typed_and_writes_back_what_it_read():
    manifest = Manifest.from_json(GOOD)
    assert manifest.inputs == [TensorSpec("x", "float32", ["batch", 4])]
    assert manifest.variants["onnx"].opset == 18 and manifest.postprocess.labels == ["no", "yes"]
    assert manifest.static_batch is None and manifest.variant_bytes("onnx") == 5
    written = manifest.to_json()
    assert {k: v for k, v in written.items() if k in GOOD} == GOOD
    assert Manifest.from_json(written) == manifest


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(colour="red"), "unknown field 'colour' in manifest.json"),
    (lambda m: m["variants"]["onnx"].update(shader="x"), "unknown field 'shader' in variant 'onnx'"),
    (lambda m: m.pop("inputs"), "manifest.json has no 'inputs' field"),
    (lambda m: m["inputs"][0].pop("dtype"), r"inputs\[0\] has no 'dtype' field"),
    (lambda m: m["inputs"][0].update(shape="batch"), r"inputs\[0\]'s shape is 'batch', not a list"),
    (lambda m: m["postprocess"].update(softmax="yes"), "softmax is 'yes', not a bool"),
    (lambda m: m["variants"].update(tflite={"file": "m.tflite", "format": "tflite"}), "unknown variant 'tflite'"),
    (lambda m: m.update(torchwork_artifact=2), "format version 2"),
])
def test_a_damaged_or_foreign_manifest_is_refused_naming_the_field(tmp_path, change, message):
    data = json.loads(json.dumps(GOOD))
    change(data)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match=message) as raised:
        read_manifest(tmp_path, check_files=False)
    assert str(tmp_path) in str(raised.value) and "re-export" in str(raised.value).lower()


def test_a_static_batch_runs_in_chunks_padded_with_copies_of_their_first_row():
    seen = []

    def run(inputs):
        seen.append(inputs[0].clone())
        return [inputs[0] * 2]

    x = torch.arange(12.0).reshape(6, 2)
    out = run_in_chunks(run, (x,), static_batch=4)[0]
    assert torch.equal(out, x * 2) and [len(batch) for batch in seen] == [4, 4]
    assert torch.equal(seen[1], torch.stack([x[4], x[5], x[4], x[4]]))  # the last chunk, filled up


def test_softmax_and_the_row_count_rule():
    assert np.allclose(softmax(np.array([[1000.0, 0.0, 0.0]])), [[1.0, 0.0, 0.0]])
    with pytest.raises(ModelOutputError, match="returned 2 rows for 3 items"):
        check_row_count([1, 2], 3)
