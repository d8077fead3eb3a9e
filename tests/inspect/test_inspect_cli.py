"""``torchwork graph``: an unmodified script's first backward, a tensor at FILE:LINE, a model factory;
clear errors; ``--help`` imports no torch. Real subprocesses, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def torchwork(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchwork.cli", "graph", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_script_first_backward_names_the_cut_line(tmp_path) -> None:
    script = REPO / "examples" / "mistakes" / "broken_graph.py"
    done = torchwork("-o", "bg.html", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(the encoder never learned)" not in done.stdout  # stopped at its first backward: 19 steps less
    assert "stopped" in done.stderr and "at its first backward()" in done.stderr
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if ".detach()" in text)
    assert f"encoder.0.weight: cut by .detach() at {script}:{line}" in done.stdout
    page = (tmp_path / "bg.html").read_text()
    assert "encoder.0.bias" in page and "NllLossBackward0" in page


def test_at_file_line_captures_that_tensor(tmp_path) -> None:
    (tmp_path / "steps.py").write_text(textwrap.dedent("""\
        import sys
        import torch
        w = torch.nn.Parameter(torch.ones(3))
        h = (w * float(sys.argv[1])).sigmoid()
        loss = h.sum()
        print("done", loss.item())
        """))
    done = torchwork("--at", "steps.py:4", "--run-on", "steps.py", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done 2.64" in done.stdout  # the script's own argument arrived
    assert "autograd graph: 2 nodes, 1 leaves" in done.stdout and "SigmoidBackward0" in done.stdout
    assert "SumBackward0" not in done.stdout
    assert (tmp_path / "graph.html").is_file()


@pytest.mark.parametrize("run_on", [False, True])
def test_a_training_script_stops_at_its_first_backward_unless_asked_to_run_on(tmp_path, run_on) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import pathlib
        import torch
        w = torch.nn.Parameter(torch.ones(3))
        for step in range(3):
            (w * 2).sum().backward()
            pathlib.Path(f"step-{step}").write_text("trained")  # what a long training run would go on doing
        raise SystemExit(4)
        """))
    done = torchwork(*(["--run-on"] if run_on else []), "train.py", cwd=tmp_path)
    steps = sorted(p.name for p in tmp_path.glob("step-*"))
    assert "MulBackward0" in done.stdout and (tmp_path / "graph.html").is_file()
    if run_on:
        assert steps == ["step-0", "step-1", "step-2"] and done.returncode == 1  # the script's failure, reported
    else:
        assert steps == [] and done.returncode == 0, done.stderr  # stopped before the first backward ran
        assert "graph: stopped train.py at its first backward()" in done.stderr


def test_model_factory_with_input_shape(tmp_path) -> None:
    (tmp_path / "models.py").write_text(textwrap.dedent("""\
        import torch
        def build():
            return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
        """))
    done = torchwork("models.py:build", "--input-shape", "4,5", "-o", "mlp.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "saved for backward: 192 B in 2 tensors" in done.stdout  # input 4x5 and ReLU's result 4x7 floats
    assert (tmp_path / "mlp.html").is_file()


@pytest.mark.slow
def test_clear_errors(tmp_path) -> None:
    (tmp_path / "nograd.py").write_text("import torch\nprint(torch.ones(2).sum())\n")
    done = torchwork("nograd.py", cwd=tmp_path)
    assert done.returncode == 2 and "the script never called backward()" in done.stderr
    done = torchwork("--input-shape", "4,x", "os:getcwd", cwd=tmp_path)
    assert done.returncode == 2 and "--input-shape '4,x'" in done.stderr
    done = torchwork("missing.py", cwd=tmp_path)
    assert done.returncode == 2 and "no script 'missing.py'" in done.stderr
    done = torchwork("os:getcwd", cwd=tmp_path)
    assert done.returncode == 2 and "must return a torch.nn.Module" in done.stderr


def test_help_imports_no_torch(tmp_path) -> None:
    probe = ("import sys\nfrom torchwork.cli import main\nfor argv in (['--help'], ['graph', '--help']):\n"
             "    try:\n        main(argv)\n    except SystemExit:\n        pass\nprint('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.strip().endswith("False") and "--input-shape" in done.stdout and "graph" in done.stdout


def test_the_readme_example_prints_what_the_readme_shows(tmp_path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "examples" / "inspect_graph.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = done.stdout.splitlines()
    assert first.startswith("used only under no_grad/inference_mode, at ") and first.endswith("inspect_graph.py:15")
    assert second == "{'body': 1024, '': 1408} 2432" and (tmp_path / "graph.html").is_file()


def test_script_mode_does_not_count_a_constructors_initialisation_as_a_use(tmp_path) -> None:
    (tmp_path / "unused.py").write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.used = nn.Linear(3, 2)
                self.unused = nn.Linear(3, 2)

            def forward(self, x):
                return self.used(x)


        model = Net()
        model(torch.randn(4, 3)).sum().backward()
        """))
    done = torchwork("unused.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "unused.weight: never used in forward" in done.stdout, done.stdout
    assert "unused.bias: never used in forward" in done.stdout
