"""`torchwork doctor s.py --json` and `torchwork graph s.py -o out.html`: as with python, torchrun or pdb,
everything after the script is the script's (issue 48: a real script's own --json, --debug or -o flags were
taken by the command); the command's options go before the script, and a `--` right after it is dropped."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """import sys
import torch
print("ARGV", sys.argv[1:])
model = torch.nn.Linear(3, 2)
model(torch.randn(4, 3)).sum().backward()
"""


def torchwork(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchwork.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_everything_after_the_script_is_the_scripts_and_the_doctors_options_go_before(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    theirs = torchwork("doctor", "s.py", "--json", "--debug", "-o", "x", cwd=tmp_path)
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    assert "ARGV ['--json', '--debug', '-o', 'x']" in theirs.stdout  # the doctor printed text, not JSON
    ours = torchwork("doctor", "--json", "s.py", "--epochs", "3", cwd=tmp_path)
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert set(json.loads(ours.stdout)) >= {"findings", "exit"}
    assert "ARGV ['--epochs', '3']" in ours.stderr  # the script's own stdout goes to stderr under --json
    separated = torchwork("doctor", "--json", "s.py", "--", "--json", cwd=tmp_path)
    assert "ARGV ['--json']" in separated.stderr


def test_a_script_that_fails_on_a_command_option_gets_a_hint(tmp_path):
    (tmp_path / "s.py").write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    done = torchwork("doctor", "s.py", "--json", cwd=tmp_path)
    assert "unrecognized arguments: --json" in done.stderr and "the script exited with 2" in done.stdout
    assert "torchwork doctor --json SCRIPT.py" in done.stderr


def test_graph_output_before_the_script_and_the_scripts_own_o_after(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = torchwork("graph", "-o", "out.html", "s.py", "-o", "theirs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out.html").is_file() and not (tmp_path / "graph.html").exists()
    assert "ARGV ['-o', 'theirs']" in done.stdout + done.stderr


def test_graph_options_after_a_model_factory_are_graphs_and_get_no_misplaced_hint(tmp_path, capsys, monkeypatch):
    """After MODULE:FACTORY there is no script: graph reads the options itself, so a refusal of one of them
    must not say it "went to the script"."""
    from torchwork.cli import main

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    (tmp_path / "factory.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(3, 2)\n")
    assert main(["graph", f"{tmp_path / 'factory.py'}:build", "--input-dtype", "bogus"]) == 2
    error = capsys.readouterr().err
    assert "--input-dtype 'bogus': use float32 or int64" in error
    assert "went to the script" not in error
