"""The Open Inference Protocol (KServe v2) on a real ``torchwork serve``, driven by the real, unmodified clients:
``tritonclient.http`` (binary tensors, its default, and JSON) and KServe's ``InferenceRESTClient``; every answer
is compared with ``POST /predict``'s for the same items."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import struct
import sys
import types

import numpy as np
import pytest
from serve_fixtures import metric_value, parallel, probabilities
from serve_models import DIGIT_LABELS, TEXT_LABELS, sentences

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402


def kserve_client():
    """KServe's REST client module, unmodified. ``import kserve`` would also import its model server (and
    Kubernetes' client), whose pins conflict with ours, so the package is installed without its
    dependencies and only its client modules are imported: the package's ``__init__`` is not run."""
    if "kserve" not in sys.modules:
        spec = importlib.util.find_spec("kserve")
        if spec is None or spec.submodule_search_locations is None:
            pytest.skip("kserve is not installed")
        package = types.ModuleType("kserve")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["kserve"] = package
    from kserve import inference_client
    from kserve.protocol import infer_type

    return inference_client, infer_type


def model_name(server) -> str:
    status, _, index = server.request("POST", "/v2/repository/index", {})
    assert status == 200 and len(index) == 1 and index[0]["state"] == "READY", index
    return index[0]["name"]


def predict_rows(server, inputs, labels) -> np.ndarray:
    status, _, body = server.predict(inputs)
    assert status == 200, body
    return np.array([probabilities(p, labels) for p in body["predictions"]])


def assert_equal_to_predict(v2: np.ndarray, expected: np.ndarray) -> None:
    """/predict's numbers: the v2 datatype is the model's own (FP32 or FP64), and the values are /predict's
    up to the last bits of the model's float32 arithmetic. The two answers are two forward passes, and one
    pass of the same batch can differ from another by a float32 step in a logit (the BLAS kernel's path
    depends on where the batch lies in memory): seen once in a random-order run, a probability of 1.2e-7
    off by 4.8e-7 of itself, 5.5e-14 absolute. The tolerance admits a few such steps; a row out of order or
    a value carried in half precision (1e-3 of itself) fails."""
    assert v2.dtype in (np.float32, np.float64)
    np.testing.assert_allclose(v2.astype(np.float64), expected, rtol=1e-5, atol=1e-12)


def triton(server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")


# ---------------------------------------------------------------- tritonclient.http
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_text_answers_equal_predict(text_server, binary):
    texts, _ = sentences(8, seed=3)  # the server's --max-items
    client = triton(text_server)
    name = model_name(text_server)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(name)
    metadata = client.get_model_metadata(name)
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert metadata["outputs"][1]["name"] == "probabilities" and metadata["outputs"][1]["shape"] == [-1, 2]
    text = httpclient.InferInput("text", [len(texts)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object), binary_data=binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("probabilities", "label")]
    result = client.infer(name, [text], outputs=outputs, request_id="req-7")
    expected = predict_rows(text_server, texts, TEXT_LABELS)
    assert_equal_to_predict(result.as_numpy("probabilities"), expected)
    assert result.as_numpy("probabilities").dtype.name == {"FP32": "float32", "FP64": "float64"}[
        metadata["outputs"][1]["datatype"]]
    labels = [v.decode() if isinstance(v, bytes) else v for v in result.as_numpy("label")]
    assert labels == [TEXT_LABELS[i] for i in expected.argmax(axis=1)]
    assert result.get_response()["id"] == "req-7"
    client.close()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_digits_answers_equal_predict_under_concurrency(digits_server, binary):
    from sklearn.datasets import load_digits

    pixels = (load_digits().data[:48] / 16.0).astype(np.float32)
    name = model_name(digits_server)
    expected = np.concatenate([predict_rows(digits_server, pixels[i:i + 8].tolist(), DIGIT_LABELS)
                               for i in range(0, 48, 8)])

    def ask(start: int) -> np.ndarray:
        client = triton(digits_server)
        try:
            image = httpclient.InferInput("input", [3, 64], "FP32")
            image.set_data_from_numpy(pixels[start:start + 3], binary_data=binary)
            if binary:  # no outputs named: the client asks for every output binary
                return client.infer(name, [image]).as_numpy("probabilities")
            asked = [httpclient.InferRequestedOutput("probabilities", binary_data=False)]
            return client.infer(name, [image], outputs=asked).as_numpy("probabilities")
        finally:
            client.close()

    results = parallel(ask, range(0, 48, 3), workers=8)
    assert_equal_to_predict(np.concatenate(results), expected)
    metadata = triton(digits_server).get_model_metadata(name, model_version="1")
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]


def test_tritonclient_sees_errors_with_their_status(digits_server):
    client = triton(digits_server)
    name = model_name(digits_server)
    image = httpclient.InferInput("input", [1, 63], "FP32")
    image.set_data_from_numpy(np.zeros((1, 63), np.float32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer(name, [image])
    assert caught.value.status() == "422" and "[items, 64]" in caught.value.message()
    with pytest.raises(InferenceServerException) as caught:
        client.infer("no-such-model", [image])
    assert caught.value.status() == "404" and name in caught.value.message()
    assert not client.is_model_ready("no-such-model")
    client.close()


# ---------------------------------------------------------------- KServe's InferenceRESTClient
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_kserve_client_answers_equal_predict(text_server, digits_server, binary):
    from sklearn.datasets import load_digits

    inference_client, infer_type = kserve_client()
    texts, _ = sentences(5, seed=11)
    pixels = (load_digits().data[:4] / 16.0).astype(np.float32)

    async def ask() -> tuple:
        client = inference_client.InferenceRESTClient(inference_client.RESTConfig(protocol="v2", retries=0))
        text_url, digits_url = f"http://127.0.0.1:{text_server.port}", f"http://127.0.0.1:{digits_server.port}"
        assert await client.is_server_ready(text_url) and await client.is_server_live(digits_url)
        text = infer_type.InferInput("text", [len(texts)], "BYTES")
        text.set_data_from_numpy(np.array(texts, dtype=object), binary_data=binary)
        image = infer_type.InferInput("input", [4, 64], "FP32")
        image.set_data_from_numpy(pixels, binary_data=binary)
        asked = [infer_type.RequestedOutput("probabilities", {"binary_data": binary})]
        text_answer = await client.infer(text_url, infer_type.InferRequest(
            model_name(text_server), [text], request_outputs=asked), model_name=model_name(text_server))
        digits_answer = await client.infer(digits_url, infer_type.InferRequest(
            model_name(digits_server), [image], request_outputs=asked), model_name=model_name(digits_server))
        await client._client.aclose()
        return text_answer, digits_answer

    text_answer, digits_answer = asyncio.run(ask())
    assert_equal_to_predict(text_answer.outputs[0].as_numpy(), predict_rows(text_server, texts, TEXT_LABELS))
    assert_equal_to_predict(digits_answer.outputs[0].as_numpy(),
                            predict_rows(digits_server, pixels.tolist(), DIGIT_LABELS))


# ---------------------------------------------------------------- the protocol's routes and errors, raw
def infer_raw(server, name, body: bytes, headers: dict[str, str] | None = None):
    return server.request("POST", f"/v2/models/{name}/infer", body, headers=headers)


def test_server_metadata_health_and_repository(text_server):
    status, _, metadata = text_server.request("GET", "/v2")
    assert status == 200 and metadata["name"] == "torchwork" and "binary_tensor_data" in metadata["extensions"]
    assert text_server.request("GET", "/v2/health/live")[2] == {"live": True}
    assert text_server.request("GET", "/v2/health/ready")[2] == {"ready": True}
    name = model_name(text_server)
    assert text_server.request("POST", "/v2/repository/index", {"ready": True})[2][0]["name"] == name
    assert text_server.request("GET", f"/v2/models/{name}/versions/1/ready")[2]["ready"] is True
    status, _, answer = text_server.request("GET", f"/v2/models/{name}/versions/9")
    assert status == 404 and set(answer) == {"error"} and "version '9'" in answer["error"]


BYTES_ONE = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a lovely film"]}


def test_malformed_requests_get_the_right_4xx_with_an_error_field(text_server, digits_server):
    text, digits = model_name(text_server), model_name(digits_server)
    pixels = np.zeros((1, 64), np.float32)
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 256}}]}).encode()
    nan = pixels.copy()
    nan[0, 9] = np.nan
    cases = [
        (text_server, text, b'{"inputs": [', {}, 400, "not valid JSON"),
        (text_server, text, b"[1]", {}, 400, "not an object"),
        (text_server, text, json.dumps({"inputs": [{**BYTES_ONE, "shape": [2]}]}).encode(), {}, 400,
         "1 elements in \"data\" for a shape of 2"),
        (text_server, text, json.dumps({"inputs": [{**BYTES_ONE, "datatype": "FP32"}]}).encode(), {}, 400,
         "is not a FP32 number"),
        (text_server, text, json.dumps({"inputs": [{**BYTES_ONE, "name": "words"}]}).encode(), {}, 422,
         "takes one input 'text'"),
        (text_server, text, json.dumps({"inputs": [{**BYTES_ONE, "shape": [9], "data": ["x"] * 9}]}).encode(),
         {}, 422, "9 items; send 1 to 8"),
        (text_server, text, json.dumps({"inputs": [{**BYTES_ONE, "data": ["x" * 201]}]}).encode(), {}, 422,
         "201 characters"),
        (text_server, text, json.dumps({"inputs": [BYTES_ONE], "outputs": [{"name": "logits"}]}).encode(), {},
         400, "no output 'logits'"),
        (text_server, text, json.dumps({"inputs": [BYTES_ONE]}).encode(), {"Content-Type": "text/plain"}, 415,
         "text/plain"),
        (digits_server, digits, header + pixels.tobytes()[:-4], {"Inference-Header-Content-Length": str(len(header))},
         400, "binary_data_size=256 but 252 bytes"),
        (digits_server, digits, header + pixels.tobytes() + b"xx",
         {"Inference-Header-Content-Length": str(len(header))}, 400, "2 bytes of binary data after"),
        (digits_server, digits, header + nan.tobytes(), {"Inference-Header-Content-Length": str(len(header))},
         422, "[0, 9] is not a finite number"),
        (digits_server, digits, header + pixels.tobytes(), {"Inference-Header-Content-Length": "x"}, 400,
         "not a number"),
        (digits_server, "nope", header + pixels.tobytes(), {"Inference-Header-Content-Length": str(len(header))},
         404, "no model 'nope'"),
    ]
    for server, name, body, headers, status, words in cases:
        got, response_headers, answer = infer_raw(server, name, body, headers)
        assert got == status, (words, answer)
        assert set(answer) == {"error"} and words in answer["error"], (words, answer)
        assert response_headers["content-type"] == "application/json"
    assert metric_value(digits_server.metrics(), 'torchwork_requests_total{status="400"}') >= 3


def test_huge_declared_shapes_get_400_and_no_traceback_in_the_log(text_server, digits_server):
    """A zero-element tensor with a 2**62 dimension answered 500 with a traceback logged per request, and 2**26
    declared BYTES elements in a 111-byte body were made before the data was looked at."""
    text, digits = model_name(text_server), model_name(digits_server)
    empty = {"name": "input", "datatype": "FP32", "shape": [0, 2**62], "parameters": {"binary_data_size": 0}}
    declared = {"name": "text", "datatype": "BYTES", "shape": [2**26], "parameters": {"binary_data_size": 0}}
    for server, name, entry, words in [(digits_server, digits, empty, "dimension 1 is 4611686018427387904"),
                                       (digits_server, digits, {**empty, "shape": [1, 2**62, 0]}, "dimension 1"),
                                       (text_server, text, declared, "cannot hold 67108864 BYTES elements")]:
        header = json.dumps({"inputs": [entry]}).encode()
        status, _, answer = infer_raw(server, name, header, {"Inference-Header-Content-Length": str(len(header))})
        assert status == 400 and words in answer["error"], answer
        assert "Traceback" not in server.stderr() and "unexpected error" not in server.stderr()


def test_bytes_tensors_travel_length_prefixed_both_ways(text_server):
    name = model_name(text_server)
    texts = ["a lovely film", "\u00e9t\u00e9 \U0001F600 terrible"]
    raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    header = json.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "outputs": [{"name": "label", "parameters": {"binary_data": True}}]}).encode()
    conn = text_server.connection()
    conn.request("POST", f"/v2/models/{name}/infer", header + raw,
                 {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert response.status == 200 and response.getheader("content-type") == "application/octet-stream"
    json_length = int(response.getheader("inference-header-content-length"))
    document, tail = json.loads(body[:json_length]), body[json_length:]
    assert document["outputs"][0]["parameters"]["binary_data_size"] == len(tail)
    labels, offset = [], 0
    while offset < len(tail):
        (length,) = struct.unpack_from("<I", tail, offset)
        labels.append(tail[offset + 4:offset + 4 + length].decode())
        offset += 4 + length
    expected = predict_rows(text_server, texts, TEXT_LABELS)
    assert labels == [TEXT_LABELS[i] for i in expected.argmax(axis=1)]
