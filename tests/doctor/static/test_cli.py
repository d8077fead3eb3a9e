"""doctor/static/cli.py: ``torchwork doctor --static`` prints one scan in the format asked for (text, json,
sarif, github annotations) and exits 1 on an error finding, 0 on a clean source; nothing is run. The rules
themselves are pinned in tests/doctor/test_doctor_static.py."""

from __future__ import annotations

import json

import pytest

from torchwork.cli import build_parser
from torchwork.doctor.static.cli import cli_main

LOOP = """import torch
from torch import nn
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
{zero}    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def _scan(capsys: pytest.CaptureFixture[str], path: str, *options: str) -> tuple[int, str]:
    code = cli_main(build_parser().parse_args(["doctor", "--static", *options, path]))
    return code, capsys.readouterr().out


@pytest.fixture
def sources(tmp_path):
    (tmp_path / "bad.py").write_text(LOOP.format(zero=""))
    (tmp_path / "good.py").write_text(LOOP.format(zero="    optimizer.zero_grad()\n"))
    return tmp_path


def test_an_error_finding_exits_1_in_every_format_and_a_clean_file_0(sources, capsys) -> None:
    code, text = _scan(capsys, str(sources / "bad.py"))
    assert code == 1 and "missing-zero-grad" in text and "bad.py:7" in text
    code, out = _scan(capsys, str(sources / "bad.py"), "--json")
    assert code == 1 and [f["id"] for f in json.loads(out)["findings"]] == ["missing-zero-grad"]
    code, out = _scan(capsys, str(sources / "bad.py"), "--format", "sarif")
    assert code == 1 and json.loads(out)["runs"][0]["results"][0]["ruleId"] == "missing-zero-grad"
    code, out = _scan(capsys, str(sources / "bad.py"), "--format", "github")
    assert code == 1 and out.startswith("::error file=") and "line=7" in out
    code, out = _scan(capsys, str(sources / "good.py"), "--format", "github")
    assert code == 0 and out == ""
