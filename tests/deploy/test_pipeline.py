"""deploy/pipeline.py: which dims an export makes dynamic (the batch; the length of token ids, or of any 2-D+
input when asked), the example widened so that torch.export does not specialise a dim of size 1, and an
``export`` refused before any work when the model or the output folder is wrong (nothing written). The
exports themselves run in the other tests of tests/deploy."""

from __future__ import annotations

import os

import pytest
import torch

from torchwork.deploy.pipeline import dynamic_spec, export, widen
from torchwork.errors import ConfigError


def test_the_batch_is_dynamic_and_the_length_of_token_ids_by_default() -> None:
    ids, features, flags = torch.zeros(4, 7, dtype=torch.long), torch.zeros(4, 7), torch.zeros(4, 7, dtype=torch.bool)
    assert dynamic_spec([ids, features, flags], True, None) == [{0: "batch", 1: "length"}, {0: "batch"}, {0: "batch"}]
    assert dynamic_spec([ids], False, None) == [{1: "length"}]
    assert dynamic_spec([ids, features], True, False) == [{0: "batch"}, {0: "batch"}]
    assert dynamic_spec([features], True, True) == [{0: "batch", 1: "length"}]


def test_a_dynamic_length_without_a_second_dim_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="no input has a dim 1"):
        dynamic_spec([torch.zeros(3)], True, True)


def test_widen_doubles_a_batch_of_one_and_pads_a_length_of_one_leaving_the_rest() -> None:
    ids, lengths = torch.tensor([[5]]), torch.tensor([1])
    wide = widen((ids, lengths), [{0: "batch", 1: "length"}, {0: "batch"}])
    assert wide[0].tolist() == [[5, 0], [5, 0]] and wide[1].tolist() == [1, 1]
    kept = (torch.ones(3, 4),)
    assert widen(kept, [{0: "batch"}])[0] is kept[0]


def test_export_refuses_a_non_module_and_a_folder_that_is_not_an_artifact_writing_nothing(tmp_path) -> None:
    with pytest.raises(ConfigError, match="must be a torch.nn.Module"):
        export(lambda x: x, torch.ones(1, 2), tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), taken, formats=("onnx",))
    with pytest.raises(ConfigError, match="is not a torchwork artifact"):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), taken, formats=("onnx",), overwrite=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "taken"]


def test_overwrite_replaces_a_torchwork_artifact_and_nothing_else(tmp_path, monkeypatch) -> None:
    """`--overwrite` deleted a web app's folder: its own manifest.json passed the check, and its code went with
    the folder. Only a valid artifact whose file table lists every file there is replaced."""
    webapp = tmp_path / "webapp"
    (webapp / "src").mkdir(parents=True)
    (webapp / "manifest.json").write_text('{"name": "my-web-app", "version": "1.0.0"}')
    (webapp / "src" / "app.js").write_text("console.log('mine')")
    with pytest.raises(ConfigError, match=r"webapp is not a torchwork artifact \(its manifest.json: "):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), webapp, formats=("onnx",), overwrite=True)
    assert (webapp / "src" / "app.js").read_text() == "console.log('mine')"
    artifact = tmp_path / "artifact"
    export(torch.nn.Linear(2, 2), torch.ones(1, 2), artifact, formats=("onnx",))
    (artifact / "notes.txt").write_text("mine")  # a file the artifact does not list
    with pytest.raises(ConfigError, match=r"holds 1 file\(s\) its artifact does not list \(notes.txt\)"):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), artifact, formats=("onnx",), overwrite=True)
    (artifact / "notes.txt").unlink()
    export(torch.nn.Linear(2, 2), torch.ones(1, 2), artifact, formats=("onnx",), overwrite=True)  # replaced
    monkeypatch.chdir(artifact)
    with pytest.raises(ConfigError, match="is the working directory or holds it"):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), ".", formats=("onnx",), overwrite=True)


def test_an_export_killed_earlier_leaves_nothing_once_the_next_one_runs(tmp_path) -> None:
    """SIGKILL cannot be caught: the next export into the same folder removes what a dead process left
    (its temp folder, the artifact it was replacing), and leaves a live process's folders alone."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    pid = int(dead.stdout)
    left = [tmp_path / f".model.export-{pid}-a1b2", tmp_path / f".model.old-{pid}-1764590000000000000"]
    running = tmp_path / f".model.export-{os.getppid()}-c3d4"  # a process that is alive: not ours to remove
    for folder in (*left, running):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"half")
    export(torch.nn.Linear(3, 2), torch.randn(2, 3), tmp_path / "model", formats=("onnx",), verify_rounds=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", running.name])


def test_a_sigterm_during_export_removes_its_temp_folder(tmp_path) -> None:
    import signal
    import subprocess
    import sys
    import time

    factory = tmp_path / "slow_factory.py"
    factory.write_text(
        "import time, torch\n"
        "class Slow(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(3, 2)\n"
        "    def forward(self, x):\n"
        "        time.sleep(0.5)  # each call: long enough to be stopped inside the export\n"
        "        return self.linear(x)\n"
        "def build():\n"
        "    return {'model': Slow(), 'example_inputs': torch.randn(2, 3)}\n")
    out = tmp_path / "artifact"
    process = subprocess.Popen([sys.executable, "-m", "torchwork.cli", "export", f"{factory}:build", "--format",
                                "onnx", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".artifact.export-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob(".artifact.export-*")), "the export never started its temp folder"
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 143, output
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("slow_factory.py", "__pycache__"))
    assert left == [], output  # neither the temp folder nor a half-written artifact
