"""`torchwork export` from a model factory and a checkpoint, in a real subprocess; its error paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork.cli import main as cli_main
from torchwork.deploy import load_weights, read_manifest

SRC = str(Path(__file__).resolve().parents[2] / "src")

FACTORY = textwrap.dedent('''
    import torch
    from sklearn.datasets import load_digits
    from torch import nn


    def architecture():
        return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


    def build():
        torch.manual_seed(0)
        digits = load_digits()
        x = torch.tensor(digits.data[-200:] / 16.0, dtype=torch.float32)
        return {"model": architecture(), "example_inputs": x[:4], "samples": x,
                "targets": torch.tensor(digits.target[-200:]), "labels": [str(i) for i in range(10)]}


    def static_batch():
        class Reshape(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(64, 10)

            def forward(self, x):
                return self.linear(x).reshape(int(x.shape[0]), 10)

        return Reshape(), torch.zeros(4, 64)
''')


@pytest.fixture()
def factory(tmp_path):
    path = tmp_path / "digits_factory.py"
    path.write_text(FACTORY)
    return path


def _checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint as a training run writes it: weights under "model", saved from a DDP-wrapped model."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": []}, "format_version": 1}, path)
    return model.state_dict()


def test_export_cli_from_a_checkpoint_in_a_subprocess(tmp_path, factory):
    weights = _checkpoint(tmp_path / "step-000000010.pt")
    out = tmp_path / "artifact"
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "export", str(tmp_path / "step-000000010.pt"),
                           "--model", f"{factory}:build", "--format", "onnx,pt2", "-o", str(out),
                           "--verify-rounds", "5"],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}: variants onnx, pt2" in done.stdout
    assert "throughput b64" in done.stdout  # the factory gave held-out samples, so export verified them
    stored = load_weights(out)
    assert all(torch.equal(stored[k], weights[k]) for k in weights)
    assert read_manifest(out).postprocess.labels[:2] == ["0", "1"]


def test_export_cli_from_a_factory_with_int8_as_json(tmp_path, factory, capsys):
    out = tmp_path / "int8"
    code = cli_main(["export", f"{factory}:build", "--format", "onnx", "--quantize", "int8", "-o", str(out),
                     "--json", "--verify-rounds", "5"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["variants"] == ["onnx", "onnx-int8"]
    assert report["verify"]["timing_rule"].startswith("5 interleaved rounds")  # --verify-rounds reached it
    assert report["verify"]["variants"]["onnx-int8"]["kind"] == "quantized"


def test_export_cli_refusal_exits_2_and_writes_nothing(tmp_path, factory, capsys):
    out = tmp_path / "static"
    assert cli_main(["export", f"{factory}:static_batch", "--format", "onnx", "-o", str(out)]) == 2
    assert "static (4)" in capsys.readouterr().err and not out.exists()


class NotWeights:
    pass


@pytest.mark.parametrize(("case", "message"), [
    ("not_a_run", "run folder"),
    ("missing_factory", "does not exist"),
    ("other_keys", "does not match the model"),
    ("other_shapes", "does not fit the model"),
    ("pickled", "weights_only=True"),
    ("no_model", "pass a model factory"),
])
def test_export_cli_errors_are_clear(tmp_path, factory, capsys, case, message):
    source, extra = str(tmp_path / "ckpt.pt"), ["--model", f"{factory}:build"]
    if case == "not_a_run":
        (tmp_path / "run").mkdir()
        source = str(tmp_path / "run")
    elif case == "missing_factory":
        _checkpoint(tmp_path / "ckpt.pt")
        extra = ["--model", str(tmp_path / "nope.py:build")]
    elif case == "other_keys":
        torch.save({"model": nn.Linear(3, 3).state_dict()}, tmp_path / "ckpt.pt")
    elif case == "other_shapes":
        other = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
        torch.save({"model": other.state_dict()}, tmp_path / "ckpt.pt")
    elif case == "pickled":
        torch.save({"model": nn.Linear(3, 3).state_dict(), "extra": NotWeights()}, tmp_path / "ckpt.pt")
    else:
        _checkpoint(tmp_path / "ckpt.pt")
        extra = []
    assert cli_main(["export", source, *extra, "-o", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_export_cli_from_a_run_folder(tmp_path, factory, capsys):
    """A run folder as torchwork.runs writes it: best.pt wins over the newest step checkpoint."""
    runs = pytest.importorskip("torchwork.runs.checkpoint")
    folder = pytest.importorskip("torchwork.runs.folder")
    run = folder.new_run_folder(tmp_path / "runs")
    torch.manual_seed(2)
    best, newest = (nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)) for _ in range(2))
    runs.save_checkpoint({"model": newest.state_dict(), "format_version": 1}, run / "checkpoints" / "step-000000020.pt")
    runs.save_checkpoint({"model": best.state_dict(), "format_version": 1}, run / "checkpoints" / "best.pt")
    out = tmp_path / "artifact"
    assert cli_main(["export", str(tmp_path / "runs"), "--model", f"{factory}:build", "--format", "onnx", "-o",
                     str(out), "--verify-rounds", "5"]) == 0
    assert "best.pt" in capsys.readouterr().err
    stored = load_weights(out)
    assert all(torch.equal(stored[k], v) for k, v in best.state_dict().items())


def test_a_factory_that_raises_is_one_line_naming_its_own_line(tmp_path, capsys):
    """It was a traceback through torchwork's cli and factory modules."""
    script = tmp_path / "m.py"
    script.write_text("def build():\n    raise RuntimeError('user bug in build')\n")
    assert cli_main(["export", f"{script}:build", "-o", str(tmp_path / "out"), "--format", "onnx"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"torchwork: error: the factory {script}:build raised RuntimeError: user bug in build "
                   f"({script}:2). Fix it there; the export starts once the factory returns (model, example_inputs).")
    assert not (tmp_path / "out").exists()
