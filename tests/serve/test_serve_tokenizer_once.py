"""A text artifact whose preprocessor carries a ``tokenizer.json`` (MiniLM's real WordPiece vocabulary) is
loaded once: in the model process, where every request runs; the server reads only its manifest, and imports
no torch (220 MB resident). Without a model process the server loads it, once. Answers equal
``load_artifact(dir)(texts)`` either way."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from serve_artifacts import TextArtifact, build_subword_artifact
from serve_fixtures import ServerProcess, probabilities

from torchwork.deploy import load_artifact

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")


@pytest.fixture(scope="module")
def subword_artifact(tmp_path_factory: pytest.TempPathFactory) -> TextArtifact:
    return build_subword_artifact(tmp_path_factory.mktemp("subword") / "artifact")


def loaded_tokenizers(pid: int) -> bool:
    """Whether the process mapped the ``tokenizers`` extension (imported it, so it could parse a vocabulary)."""
    return "tokenizers" in Path(f"/proc/{pid}/maps").read_text()


def loaded_torch(pid: int) -> bool:
    """Whether the process mapped libtorch (imported torch)."""
    return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()


def model_processes(server: ServerProcess) -> list[psutil.Process]:
    return [child for child in psutil.Process(server.process.pid).children()
            if "spawn_main" in " ".join(child.cmdline())]


def v2_probabilities(server: ServerProcess, texts: list[str]) -> np.ndarray:
    encoded = [text.encode() for text in texts]
    data = b"".join(len(item).to_bytes(4, "little") + item for item in encoded)
    header = json.dumps({"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(data)}}],
                         "parameters": {"binary_data_output": False}}).encode()
    status, _, answer = server.request("POST", f"/v2/models/{model_name(server)}/infer", header + data,
                                       headers={"Inference-Header-Content-Length": str(len(header)),
                                                "Content-Type": "application/octet-stream"})
    assert status == 200, answer
    return np.array(next(o["data"] for o in answer["outputs"] if o["name"] == "probabilities"))


def model_name(server: ServerProcess) -> str:
    return server.request("POST", "/v2/repository/index", {})[2][0]["name"]


def check_answers(server: ServerProcess, artifact: TextArtifact) -> None:
    texts = artifact.tweets[:6]
    expected = load_artifact(artifact.path)(texts).numpy()
    for text, row in zip(texts, expected):  # lone requests (which a server holding the model runs itself)
        status, _, answer = server.predict([text])
        assert status == 200, answer
        np.testing.assert_allclose(probabilities(answer["predictions"][0], artifact.classes), row, atol=1e-5)
    status, _, answer = server.predict(texts)
    rows = np.array([probabilities(p, artifact.classes) for p in answer["predictions"]])
    np.testing.assert_allclose(rows, expected, atol=1e-5)
    np.testing.assert_allclose(v2_probabilities(server, texts).reshape(expected.shape), expected, atol=1e-5)


def test_the_tokenizer_is_loaded_in_the_model_process_only(subword_artifact, tmp_path):
    server = ServerProcess(subword_artifact.path, None, log_dir=tmp_path)
    try:
        check_answers(server, subword_artifact)
        children = model_processes(server)
        assert len(children) == 1
        assert not loaded_tokenizers(server.process.pid)  # the server read the manifest alone
        assert loaded_tokenizers(children[0].pid)
        assert not loaded_torch(server.process.pid) and loaded_torch(children[0].pid)
        metadata = server.request("GET", f"/v2/models/{model_name(server)}")[2]
        assert metadata["outputs"][1]["shape"] == [-1, len(subword_artifact.classes)], metadata
    finally:
        server.stop()


def test_without_a_model_process_the_server_loads_it_once_itself(subword_artifact, tmp_path):
    server = ServerProcess(subword_artifact.path, None, "--no-model-process", log_dir=tmp_path)
    try:
        check_answers(server, subword_artifact)
        assert model_processes(server) == []
        assert loaded_tokenizers(server.process.pid) and loaded_torch(server.process.pid)
    finally:
        server.stop()


# ------------------------------------------------------------------------------------ forged tokenizers (issue 49)
def _forged_copy(artifact: Path, tmp_path: Path, change) -> Path:
    """A copy of the artifact with one preprocess or model file changed by ``change(copy)`` (which returns the
    files it changed) and the manifest's file table resealed to them, as an attacker would."""
    import shutil

    from torchwork.deploy.trust import sha256_of

    copy = tmp_path / "forged"
    shutil.copytree(artifact, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for name in change(copy):
        manifest["files"][name].update(bytes=(copy / name).stat().st_size, sha256=sha256_of(copy / name))
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def _token_id(token_id: int):
    def change(copy: Path) -> list[str]:
        path = copy / "preprocess" / "tokenizer.json"
        data = json.loads(path.read_text())
        data["model"]["vocab"]["the"] = token_id
        path.write_text(json.dumps(data))
        return ["preprocess/tokenizer.json"]

    return change


def _max_length(length: int):
    def change(copy: Path) -> list[str]:
        path = copy / "preprocess" / "subword.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "max_length": length}))
        return ["preprocess/subword.json"]

    return change


def _one_input_graph(copy: Path) -> list[str]:
    """The model replaced by a graph of one input (ids) where the artifact feeds two (ids, attention mask)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.zeros((30522, 3), dtype=np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"]),
         helper.make_node("ReduceMean", ["rows"], ["y"], axes=[1], keepdims=0)], "forged",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "length"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(copy / "model.onnx"))
    return ["model.onnx"]


@pytest.mark.parametrize("change, message", [
    (_token_id(10**9), "gives a token the id 1000000000; ids must be below 2097152"),
    (_token_id(40_000), r"fails on the artifact's preprocessor's extreme inputs \(its largest token id"),
    (_max_length(10**9), "max_length=1000000000: use an integer from 2 to 8192"),
    (_one_input_graph, r"variant 'onnx' \(model.onnx\) fails on the artifact's example inputs"),
], ids=["id 10^9", "id past the embedding", "max_length 10^9", "one input"])
def test_a_tokenizer_or_model_that_do_not_fit_are_refused_at_load(subword_artifact, tmp_path, change, message):
    from torchwork.errors import ExportError
    from torchwork.serve import predictor_from_artifact

    forged = _forged_copy(subword_artifact.path, tmp_path, change)
    with pytest.raises(ExportError, match=message):
        predictor_from_artifact(forged, threads=1)
