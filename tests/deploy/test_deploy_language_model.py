"""Exporting a language model (issue 48, item 5): a length dynamic up to a bound, the logits of a model that
returns ``(logits, loss)``, and a checkpoint whose keys carry one prefix. The model has nanoGPT's shape
(token and position embeddings, a causal self-attention block, a tied LM head, its block-size assert),
written here, tiny, so that pt2 and ONNX export in seconds; one artifact is shared by the module's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from torchwork.cli import main as cli_main
from torchwork.deploy import export, load_artifact, load_weights, read_manifest
from torchwork.deploy.manifest import TensorSpec
from torchwork.deploy.plan import ExportPlan
from torchwork.deploy.runtime import load_pt2
from torchwork.deploy.tensors import bounds_problem
from torchwork.errors import ConfigError, ExportError

VOCAB, BLOCK, WIDTH, HEADS = 61, 64, 32, 4


class CausalSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(BLOCK, WIDTH)
        self.ln_1, self.attn, self.ln_f = nn.LayerNorm(WIDTH), CausalSelfAttention(), nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        t = idx.size(1)
        assert t <= BLOCK, f"Cannot forward sequence of length {t}, block size is only {BLOCK}"
        x = self.wte(idx) + self.wpe(torch.arange(t, dtype=torch.long, device=idx.device))
        logits = self.lm_head(self.ln_f(x + self.attn(self.ln_1(x))))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return logits, loss


class DictGPT(TinyGPT):
    """The same network answering as Hugging Face models do: a dict."""

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # type: ignore[override]
        logits, loss = super().forward(idx, targets)
        return {"logits": logits, "loss": loss}


class Trained(nn.Module):
    """A training wrapper holding the network as ``.gpt``: its checkpoints' keys start with ``gpt.``."""

    def __init__(self) -> None:
        super().__init__()
        self.gpt = TinyGPT()


def ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def build_gpt() -> dict:
    """The model factory `torchwork export --model` calls (this file is its source)."""
    return {"model": TinyGPT(), "example_inputs": ids(2, 9)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[TinyGPT, Path, dict]:
    torch.manual_seed(0)
    model = TinyGPT()
    out = tmp_path_factory.mktemp("lm") / "artifact"
    report = export(model, ids(2, 17), out, formats=("pt2", "onnx"), output=0, max_length=BLOCK,
                    batch_sizes=(1, 3))
    return model, out, report


def test_a_length_bounded_at_the_block_size_matches_eager_at_2_17_and_the_bound(exported):
    model, out, report = exported
    assert report["ok"] and report["variants"] == ["pt2", "onnx"], report["refused"]
    assert {"batch 1, length 1", "batch 3, length 64"} <= set(report["parity"]["probes"])  # shortest, bound
    for fmt in ("pt2", "onnx"):
        length = [d for d in report["parity"]["formats"][fmt]["export"]["dims"] if d["requested"] == "length"]
        assert length == [{"input": "idx", "dim": 1, "requested": "length", "dynamic": True, "min": 1, "max": BLOCK}]
        artifact = load_artifact(out, variant=fmt)
        for length_now in (2, 17, BLOCK):
            tokens = ids(3, length_now, seed=length_now)
            with torch.no_grad():
                expected = model(tokens)[0]
            torch.testing.assert_close(artifact(tokens), expected, atol=1e-4, rtol=1e-3)


def test_the_manifest_records_the_bound_and_a_longer_input_is_refused(exported):
    _, out, _ = exported
    spec = read_manifest(out).inputs[0]
    assert spec.shape == ["batch", "length"] and spec.bounds == {"length": [1, BLOCK]}
    assert bounds_problem([1, BLOCK], spec) is None
    for fmt in ("pt2", "onnx"):
        with pytest.raises(ConfigError, match=f"'idx' is 65 long along dim 1 \\(length\\), over the {BLOCK}"):
            load_artifact(out, variant=fmt)(ids(1, BLOCK + 1))


def test_output_0_exports_the_logits_of_logits_and_loss_with_the_models_own_weights(exported):
    model, out, _ = exported
    manifest = read_manifest(out)
    assert [(o.name, o.shape) for o in manifest.outputs] == [("output", ["batch", "length", VOCAB])]
    assert manifest.model["output"] == 0 and manifest.model["class"].endswith(".TinyGPT")
    stored = load_weights(out)
    assert sorted(stored) == sorted(model.state_dict())
    assert torch.equal(stored["lm_head.weight"], model.lm_head.weight)
    # the program names its weights as the model does, so verify's check of them against weights.safetensors holds
    assert set(load_pt2(out / "model.pt2").state_dict) <= set(stored)


@pytest.mark.parametrize(("settings", "message"), [
    ({"max_length": 1}, "at least 2"),
    ({"max_length": True}, "at least 2"),
    ({"max_length": 64, "dynamic_length": False}, "drop one of them"),
    ({"max_length": 64, "lengths": (2, 65)}, "over max_length=64"),
    ({"output": -1}, "by its index"),
])
def test_bad_length_bounds_and_output_choices_are_refused_before_any_work(settings, message):
    with pytest.raises(ConfigError, match=message):
        ExportPlan(**settings)


def test_a_manifest_with_damaged_bounds_is_refused():
    spec = {"name": "idx", "dtype": "int64", "shape": ["batch", "length"]}
    assert TensorSpec.from_json({**spec, "bounds": {"length": [1, 64]}}).limits() == {1: (1, 64)}
    for bounds in ({"length": [64, 1]}, {"length": [1]}, {"length": "64"}, {"length": [True, 64]}):
        with pytest.raises(ExportError, match="bounds"):
            TensorSpec.from_json({**spec, "bounds": bounds})


def test_several_outputs_and_none_chosen_are_listed(tmp_path):
    with pytest.raises(ConfigError) as caught:
        export(TinyGPT(), ids(2, 17), tmp_path / "a", formats=("pt2",))
    message = str(caught.value)
    assert "[0] tensor float32 [2, 17, 61]; [1] None" in message and "output=0" in message
    with pytest.raises(ConfigError, match="'logits' tensor float32 \\[2, 17, 61\\]; 'loss' None"):
        export(DictGPT(), ids(2, 17), tmp_path / "b", formats=("pt2",), output="probabilities")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_dict_output_is_chosen_by_key_and_names_the_output(tmp_path):
    report = export(DictGPT(), ids(2, 9), tmp_path / "a", formats=("pt2",), output="logits", max_length=BLOCK,
                    batch_sizes=(1,), lengths=(2, BLOCK))
    assert report["ok"]
    assert [o.name for o in read_manifest(tmp_path / "a").outputs] == ["logits"]


def test_a_model_with_a_length_limit_is_told_the_bound_to_export_with(tmp_path):
    with pytest.raises(ExportError, match=f"max_length={BLOCK} \\(--max-length {BLOCK}\\)"):
        export(TinyGPT(), ids(2, 17), tmp_path / "a", formats=("pt2",), output=0, batch_sizes=(1,))
    with pytest.raises(ConfigError, match="over max_length=8"):
        export(TinyGPT(), ids(2, 17), tmp_path / "b", formats=("pt2",), output=0, max_length=8)


def _prefixed_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint as nanoGPT writes one (weights under "model", beside its settings), of a wrapper."""
    torch.manual_seed(3)
    trained = Trained()
    torch.save({"model": trained.state_dict(), "model_args": {"block_size": BLOCK}, "iter_num": 200}, path)
    return trained.gpt.state_dict()


def test_a_checkpoint_whose_keys_carry_one_prefix_is_refused_with_the_prefix_named(tmp_path, capsys):
    _prefixed_checkpoint(tmp_path / "ckpt.pt")
    code = cli_main(["export", str(tmp_path / "ckpt.pt"), "--model", f"{__file__}:build_gpt", "-o",
                     str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "out").exists()
    assert "Every key of the checkpoint has the prefix 'gpt.'" in error and "--strip-prefix gpt." in error


def test_the_cli_exports_the_language_model_with_the_prefix_stripped(tmp_path, capsys):
    weights = _prefixed_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "out"
    code = cli_main(["export", str(tmp_path / "ckpt.pt"), "--model", f"{__file__}:build_gpt", "--strip-prefix",
                     "gpt.", "--max-length", str(BLOCK), "--select-output", "0", "--format", "pt2",
                     "--static-batch", "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "prefix 'gpt.' stripped" in captured.err
    stored = load_weights(out)
    assert all(torch.equal(stored[k], v) for k, v in weights.items())
    assert read_manifest(out).inputs[0].bounds == {"length": [1, BLOCK]}


def test_the_exported_language_model_serves_and_refuses_past_its_bound_as_invalid(exported, tmp_path):
    """`torchwork serve` of the artifact, a real server: answers equal the model's logits at length 17, and a
    request one token past the bound is invalid (422 on /predict and /v2), not the model failing (500)."""
    import http.client
    import json
    import re
    import subprocess
    import sys

    model, out, _ = exported
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "torchwork.cli", "serve", str(out), "--port", "0",
                               "--threads", "1", "--no-model-process", "--name", "gpt"], stdout=subprocess.PIPE, stderr=log)
    try:
        line = ""
        while "listening on http" not in line:
            line = server.stdout.readline().decode()
            assert line, (tmp_path / "serve.log").read_text()
        port = int(re.search(r":(\d+)", line.split("listening on")[1]).group(1))

        def post(path: str, body: dict) -> tuple[int, dict]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read())

        tokens = ids(2, 17, seed=3)
        status, answer = post("/predict", {"inputs": tokens.tolist()})
        assert status == 200, answer
        with torch.no_grad():
            expected = model(tokens)[0]
        got = torch.tensor([prediction["output"] for prediction in answer["predictions"]])
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-3)
        status, answer = post("/predict", {"inputs": ids(1, BLOCK + 1).tolist()})
        assert status == 422, answer
        v2 = {"inputs": [{"name": "idx", "shape": [1, BLOCK + 1], "datatype": "INT64",
                          "data": ids(1, BLOCK + 1).flatten().tolist()}]}
        status, answer = post("/v2/models/gpt/infer", v2)
        assert status == 422 and f"N <= {BLOCK}" in answer["error"], answer
    finally:
        server.terminate()
        server.wait(30)
        server.stdout.close()
        log.close()
