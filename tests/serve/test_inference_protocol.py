"""The Open Inference Protocol's request decoding: a repeated binary header is checked once and reused,
and every body is still read and checked on its own."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from torchwork.serve import inference_protocol
from torchwork.serve.inference_protocol import ProtocolError, parse_request


def binary_text_request(texts: list[str], request_id: str | None = None) -> tuple[bytes, int]:
    raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    document = {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES",
                            "parameters": {"binary_data_size": len(raw)}}],
                "parameters": {"binary_data_output": True}}
    if request_id is not None:
        document["id"] = request_id
    header = json.dumps(document).encode()
    return header + raw, len(header)


def test_a_repeated_binary_header_is_checked_once_and_each_body_read_on_its_own():
    inference_protocol._LAYOUTS.clear()
    first, length = binary_text_request(["abcd"])
    second, same_length = binary_text_request(["wxyz"])
    assert length == same_length and first[:length] == second[:length]  # the very same header
    one, two = parse_request(first, length), parse_request(second, same_length)
    assert len(inference_protocol._LAYOUTS) == 1
    assert one.inputs[0].array == [b"abcd"] and two.inputs[0].array == [b"wxyz"]
    assert one.binary_output and two.outputs is None
    # The reused header still has its body checked: a short one is refused with the header's own words.
    with pytest.raises(ProtocolError, match=r"binary_data_size=8 but 7 bytes"):
        parse_request(first[:-1], length)
    with pytest.raises(ProtocolError, match="2 bytes left after 1 BYTES elements"):
        parse_request(first[:length] + struct.pack("<I", 2) + b"abcd", length)


def test_numeric_binary_inputs_are_fresh_arrays_of_each_body():
    inference_protocol._LAYOUTS.clear()
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 8}}]}).encode()
    a = parse_request(header + np.float32([1, 2]).tobytes(), len(header))
    b = parse_request(header + np.float32([3, 4]).tobytes(), len(header))
    assert a.inputs[0].array.tolist() == [[1.0, 2.0]] and b.inputs[0].array.tolist() == [[3.0, 4.0]]


def test_headers_with_json_data_or_errors_are_not_kept_and_the_kept_ones_are_bounded(monkeypatch):
    inference_protocol._LAYOUTS.clear()
    mixed = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}).encode()
    assert parse_request(mixed, len(mixed)).inputs[0].array == [b"hi"]
    bad = b'{"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "parameters": {"binary_data_size": 0}}]}'
    with pytest.raises(ProtocolError, match="non-negative integers"):
        parse_request(bad, len(bad))
    assert not inference_protocol._LAYOUTS
    monkeypatch.setattr(inference_protocol, "_LAYOUTS_KEPT", 3)
    bodies = [binary_text_request(["x"], request_id=str(i)) for i in range(5)]
    for body, length in bodies:
        assert parse_request(body, length).id is not None
    kept = [json.loads(header)["id"] for header, _ in inference_protocol._LAYOUTS]
    assert kept == ["2", "3", "4"]  # the oldest went first


def test_the_outputs_asked_for_cannot_be_changed_through_a_request():
    inference_protocol._LAYOUTS.clear()
    header = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 4}}],
                         "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    request = parse_request(header + np.float32([1]).tobytes(), len(header))
    with pytest.raises(TypeError):
        request.outputs["y"] = False  # type: ignore[index]
    assert parse_request(header + np.float32([1]).tobytes(), len(header)).binary(["y"]) == {"y": True}


class _Classifier:
    kind, dtype, item_shape = "text", "float32", ()

    def __init__(self, labels):
        self.labels = labels


def _request(outputs, binary_output=False, request_id=None):
    from torchwork.serve.inference_protocol import InferRequest

    return InferRequest(request_id, [], outputs, binary_output)


@pytest.mark.parametrize("name", ["text", 'a "100%" model'])
@pytest.mark.parametrize("outputs", [None, {"probabilities": True, "label": True}, {"label": None},
                                     {"probabilities": True}])
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_binary_answer_from_its_template_is_the_general_encoders_byte_for_byte(name, outputs, count, dtype):
    """tritonclient's default answer (every output binary, no id) is formatted into a header made once per
    outputs asked; it must be exactly what encode_response writes."""
    from torchwork.serve.encoding import prediction_fragments
    from torchwork.serve.inference_protocol import encode_response
    from torchwork.serve.v2_model import V2Model

    labels = ["negative", "neutral", "positive"]
    model = V2Model(name, "7", _Classifier(labels))
    model.learn_outputs(np.zeros((1, 3), dtype=dtype))
    rows = np.random.default_rng(count).dirichlet(np.ones(3), size=count).astype(dtype)
    fragments = prediction_fragments(labels)(rows)
    request = _request(outputs, binary_output=True)
    names = list(outputs) if outputs is not None else ["label", "probabilities"]
    for _ in range(2):  # made, then reused
        body, length = model.answer(request, fragments)
        predictions = [json.loads(f) for f in fragments]
        values = {"label": ("label", "BYTES", [count], [p["label"] for p in predictions]),
                  "probabilities": ("probabilities", "FP32" if dtype == "float32" else "FP64", [count, 3],
                                    [v for p in predictions for v in p["probabilities"].values()])}
        expected = encode_response(name, "7", None, [values[n] for n in names], {n: True for n in names})
        assert (body, length) == expected
    assert len(model._templates) == 1
    # with an id, or an output asked for as JSON, the general encoder writes it
    assert model.answer(_request(outputs, True, "r1"), fragments)[0].startswith(b'{"model_name"')
    mixed = model.answer(_request({"label": False, "probabilities": True}, True), fragments)
    assert b'"data":[' in mixed[0] and len(model._templates) == 1


# ---------------------------------------------------------------- bounds before anything is allocated (issue 49)
def test_a_large_header_is_checked_but_not_kept():
    """520 distinct 4 MiB headers once kept 2 GB: a header above the cache's size bound is never kept."""
    inference_protocol._LAYOUTS.clear()
    small, length = binary_text_request(["abcd"])
    parse_request(small, length)
    big = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                  "parameters": {"binary_data_size": 8, "padding": "x" * 100_000}}]}).encode()
    assert parse_request(big + struct.pack("<I", 4) + b"wxyz", len(big)).inputs[0].array == [b"wxyz"]
    assert len(inference_protocol._LAYOUTS) == 1  # the small one only
    assert sum(len(header) for header, _ in inference_protocol._LAYOUTS) <= inference_protocol._LAYOUT_BYTES


def test_a_bytes_tensor_larger_than_its_data_is_refused_before_its_elements_are_made(monkeypatch):
    """A 111-byte request declaring 2**26 BYTES elements made a 2**26-element list first (0.3-0.45 s of the
    event loop); the declared count is now compared with the bytes there before anything is made for it."""
    made = []
    monkeypatch.setattr(inference_protocol, "_split_bytes", lambda *args: made.append(args))
    for size in (0, 4 * 2**26 - 1):
        header = json.dumps({"inputs": [{"name": "text", "shape": [2**26], "datatype": "BYTES",
                                         "parameters": {"binary_data_size": size}}]}).encode()
        with pytest.raises(ProtocolError, match=f"binary_data_size={size} cannot hold 67108864 BYTES elements"):
            parse_request(header, len(header))
    assert not made
    monkeypatch.undo()
    with pytest.raises(ProtocolError, match="3 bytes of binary data cannot hold 1 BYTES elements"):
        inference_protocol._split_bytes(memoryview(b"abc"), 1, "inputs[0]")


@pytest.mark.parametrize(("shape", "datatype", "words"), [
    ([0, 2**62], "FP32", "dimension 1 is 4611686018427387904, more than"),
    ([1, 2**62, 0], "FP32", "dimension 1 is 4611686018427387904"),
    ([2**62, 0], "BYTES", "dimension 0 is 4611686018427387904"),
    ([1] * 40, "FP32", "has 40 dimensions; send at most 32"),
    ([2**20, 2**20], "INT8", "holds 1099511627776 elements, more than the 67108864"),
])
@pytest.mark.parametrize("binary", [True, False])
def test_shapes_are_bounded_dimension_by_dimension_and_answer_400(shape, datatype, words, binary):
    """A zero-element tensor with a 2**62 dimension once reached numpy's reshape and answered 500."""
    entry = {"name": "x", "shape": shape, "datatype": datatype}
    entry.update({"parameters": {"binary_data_size": 0}} if binary else {"data": []})
    header = json.dumps({"inputs": [entry]}).encode()
    with pytest.raises(ProtocolError, match=words) as refused:
        parse_request(header, len(header))
    assert refused.value.status == 400


def test_every_path_parameter_is_declared_in_the_published_schema():
    """A client generated from /openapi.json needs each {param} of a path declared (schemathesis: "Path
    parameter 'name' is not defined"); checked on the schema the app publishes with --docs."""
    import re

    import torch

    from torchwork.serve import ServeConfig, TorchPredictor, create_app

    predictor = TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,), labels=["a", "b"])
    schema = create_app(predictor, ServeConfig(docs=True, enable_model_control=True), name="tiny").openapi()
    templated = [path for path in schema["paths"] if "{" in path]
    assert {"/v2/models/{name}", "/v2/models/{name}/infer", "/v2/models/{name}/ready",
            "/v2/repository/models/{name}/load"} <= set(templated)
    for path in templated:
        for method, operation in schema["paths"][path].items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"\{(\w+)\}", path)), (method, path, operation.get("parameters"))
            assert all(p["required"] and p["schema"]["type"] == "string"
                       for p in operation["parameters"] if p["in"] == "path")
