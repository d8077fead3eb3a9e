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
