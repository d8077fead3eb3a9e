"""`torchwork doctor s.py --json` and `torchwork graph s.py -o out.html`: the command's own options after the
script are the command's (a `--` hands the rest to the script)."""

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


def test_doctor_json_after_the_script_is_the_doctors_and_after_dashdash_the_scripts(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = torchwork("doctor", "s.py", "--json", "--epochs", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert set(report) >= {"findings", "exit"}
    assert "ARGV ['--epochs', '3']" in done.stderr  # the script's own stdout goes to stderr under --json
    passed = torchwork("doctor", "s.py", "--", "--json", cwd=tmp_path)
    assert "ARGV ['--json']" in passed.stdout


def test_graph_output_after_the_script(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    done = torchwork("graph", "s.py", "-o", "out.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out.html").is_file() and not (tmp_path / "graph.html").exists()
