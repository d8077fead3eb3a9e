"""A text artifact whose preprocessor carries a ``tokenizer.json`` (MiniLM's real WordPiece vocabulary) is
loaded once: in the model process, where every request runs; the server reads only its manifest. Without a
model process the server loads it, once. Answers equal ``load_artifact(dir)(texts)`` either way."""

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
        metadata = server.request("GET", f"/v2/models/{model_name(server)}")[2]
        assert metadata["outputs"][1]["shape"] == [-1, len(subword_artifact.classes)], metadata
    finally:
        server.stop()


def test_without_a_model_process_the_server_loads_it_once_itself(subword_artifact, tmp_path):
    server = ServerProcess(subword_artifact.path, None, "--no-model-process", log_dir=tmp_path)
    try:
        check_answers(server, subword_artifact)
        assert model_processes(server) == []
        assert loaded_tokenizers(server.process.pid)
    finally:
        server.stop()
