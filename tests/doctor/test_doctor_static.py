"""`torchwork doctor --static` (issue 51): each rule at the mistake's line and silent on its correct twin,
the ignore comment, the walker, the output formats (SARIF 2.1.0, GitHub annotations), the exit codes, and
no torch import. The sources are written by the tests; nothing is run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchwork.cli import main
from torchwork.doctor.static import RULE_IDS, scan_paths, scan_source
from torchwork.doctor.static.files import MAX_BYTES
from torchwork.doctor.static.formats import github, sarif
from torchwork.doctor.static.scan import RULES
from torchwork.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

_LOOP = """
import torch
from torch import nn
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in loader:
{body}
"""

# rule -> (the mistake, its line, the correct twin); a line ending in `# <-` is where the finding must be
CASES: dict[str, tuple[str, str]] = {
    "missing-zero-grad": (
        _LOOP.format(body="        nn.functional.cross_entropy(model(x), y).backward()\n"
                          "        optimizer.step()  # <-"),
        _LOOP.format(body="        optimizer.zero_grad()\n"
                          "        nn.functional.cross_entropy(model(x), y).backward()\n"
                          "        optimizer.step()")),
    "requires-grad-attribute": (
        "from torch import nn\nbackbone = nn.Sequential(nn.Linear(4, 4))\nbackbone.requires_grad = False  # <-\n",
        "from torch import nn\nbackbone = nn.Sequential(nn.Linear(4, 4))\n"
        "for p in backbone.parameters():\n    p.requires_grad = False\nbackbone.requires_grad_(False)\n"),
    "scheduler-per-batch": (
        _LOOP.format(body="        optimizer.zero_grad()\n        model(x).sum().backward()\n        optimizer.step()\n"
                          "        scheduler.step()  # <-").replace(
            "for epoch", "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)\nfor epoch"),
        _LOOP.format(body="        optimizer.zero_grad()\n        model(x).sum().backward()\n        optimizer.step()\n"
                          "    scheduler.step()").replace(
            "for epoch", "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)\nfor epoch")),
    "dropout-in-eval": (
        "import torch.nn.functional as F\nfrom torch import nn\nclass Head(nn.Module):\n"
        "    def forward(self, q, k, v):\n        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)  # <-\n"
        "        return F.dropout(y, 0.2)  # <-\n",
        "import torch.nn.functional as F\nfrom torch import nn\nclass Head(nn.Module):\n"
        "    def forward(self, q, k, v):\n"
        "        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)\n"
        "        return F.dropout(y, 0.2, training=self.training)\n"),
    "loss-on-probabilities": (
        "import torch\nfrom torch import nn\ncriterion = nn.CrossEntropyLoss()\nprobs = torch.softmax(logits, dim=1)\n"
        "loss = criterion(probs, y)  # <-\n"
        "bce = nn.functional.binary_cross_entropy_with_logits(torch.sigmoid(z).squeeze(1), t)  # <-\n",
        "import torch\nfrom torch import nn\ncriterion = nn.NLLLoss()\nprobs = torch.log_softmax(logits, dim=1)\n"
        "loss = criterion(probs, y)\nce = nn.functional.cross_entropy(logits, y)\n"
        "bce = nn.functional.binary_cross_entropy(torch.sigmoid(z), t)\n"),
    "state-dict-mismatch": (
        "import torch\nmodel.load_state_dict(torch.load('ckpt.pt', weights_only=True), strict=False)  # <-\n",
        "import torch\nresult = model.load_state_dict(torch.load('ckpt.pt', weights_only=True), strict=False)\n"
        "assert not result.unexpected_keys\nmodel.load_state_dict(adapter_weights, strict=False)\n"),
    "unsafe-torch-load": (
        "import torch\nstate = torch.load('ckpt.pt')  # <-\nother = torch.load('b.pt', weights_only=False)  # <-\n",
        "import torch\nstate = torch.load('ckpt.pt', weights_only=True, map_location='cpu')\n"),
    "anomaly-mode": (
        "import torch\ntorch.autograd.set_detect_anomaly(True)  # <-\nfor x in data:\n    model(x).sum().backward()\n",
        "import torch\ntorch.autograd.set_detect_anomaly(args.debug)\nif args.debug:\n"
        "    torch.autograd.set_detect_anomaly(True)\nwith torch.autograd.detect_anomaly():\n"
        "    model(x).sum().backward()\n"),
}


def _marked(source: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if line.endswith("# <-")]


def test_every_rule_has_a_case() -> None:
    assert sorted(CASES) == sorted(RULE_IDS)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_finds_the_mistake_at_its_line_and_is_silent_on_the_twin(rule: str) -> None:
    mistake, correct = CASES[rule]
    found, _ = scan_source(mistake.encode(), "train.py")
    assert [(f.id, f.line) for f in found] == [(rule, line) for line in _marked(mistake)], found
    assert scan_source(correct.encode(), "train.py")[0] == []


def test_test_files_are_read_only_by_the_rules_that_want_them() -> None:
    # anomaly mode and a strict=False load are deliberate in a test; the other mistakes are mistakes there too
    skipped = {rule.id for rule in RULES if not rule.in_tests}
    assert skipped == {"anomaly-mode", "state-dict-mismatch"}
    for rule, (mistake, _) in sorted(CASES.items()):
        for path in ("tests/train.py", "test_train.py"):
            found = {f.id for f in scan_source(mistake.encode(), path)[0]}
            assert found == (set() if rule in skipped else {rule}), (rule, path, found)


@pytest.mark.parametrize("source", [
    # accumulation: zero_grad under the step's `if`
    _LOOP.format(body="        (model(x).sum() / 4).backward()\n        if step % 4 == 0:\n"
                      "            optimizer.step()\n            optimizer.zero_grad()"),
    # the gradients cleared by a function of the same file
    "def reset():\n    optimizer.zero_grad()\n" + _LOOP.format(body="        reset()\n        model(x).sum().backward()\n"
                                                                  "        optimizer.step()"),
    # p.grad = None, a GAN zeroing its nets, an L-BFGS closure, distributed autograd's context
    _LOOP.format(body="        model(x).sum().backward()\n        optimizer.step()\n"
                      "        for p in model.parameters():\n            p.grad = None"),
    _LOOP.format(body="        netD.zero_grad()\n        d(x).backward()\n        optimizerD.step()"),
    _LOOP.format(body="        def closure():\n            optimizer.zero_grad()\n            loss = model(x).sum()\n"
                      "            loss.backward()\n            return loss\n        optimizer.step(closure)"),
    _LOOP.format(body="        with dist_autograd.context() as cid:\n"
                      "            dist_autograd.backward(cid, [model(x).sum()])\n            opt.step(cid)"),
    # a DeepSpeed engine clears the gradients in its own step; an environment's step is not an optimizer's
    _LOOP.format(body="        engine.backward(engine(x).sum())\n        engine.step()"),
    _LOOP.format(body="        model(x).sum().backward()\n        state = env.step(action)"),
])
def test_missing_zero_grad_stays_silent_on_correct_loops(source: str) -> None:
    assert scan_source(source.encode(), "train.py")[0] == []


@pytest.mark.parametrize("source", [
    "for m in model.modules():\n    m.requires_grad = False\n",
    "from torch import nn\nclass Net(nn.Module):\n    def __init__(self):\n        self.encoder = nn.LSTM(4, 4)\n"
    "    def freeze(self):\n        self.encoder.requires_grad = False\n",
])
def test_requires_grad_on_a_provable_module_is_found(source: str) -> None:
    assert [f.id for f in scan_source(source.encode(), "m.py")[0]] == ["requires-grad-attribute"]


def test_requires_grad_on_what_may_be_a_tensor_is_left_alone() -> None:
    source = "x = torch.zeros(3)\nx.requires_grad = True\nmodel.fc.weight.requires_grad = False\nnet.requires_grad = False\n"
    assert scan_source(source.encode(), "m.py")[0] == []


def test_an_epoch_schedule_sized_in_steps_or_unknown_is_not_an_error() -> None:
    steps = CASES["scheduler-per-batch"][0].replace("step_size=1", "step_size=30000")
    assert scan_source(steps.encode(), "t.py")[0] == []
    unknown = CASES["scheduler-per-batch"][0].replace("step_size=1", "step_size=args.step")
    assert [(f.id, f.severity) for f in scan_source(unknown.encode(), "t.py")[0]] == [("scheduler-per-batch", "warning")]


def test_the_ignore_comment_silences_that_check_on_that_line_only() -> None:
    mistake = CASES["missing-zero-grad"][0]
    ignored = mistake.replace("# <-", "# torchwork: ignore[missing-zero-grad]")
    found, silenced = scan_source(ignored.encode(), "t.py")
    assert found == [] and silenced == 1
    other = mistake.replace("# <-", "# torchwork: ignore[unsafe-torch-load]")
    assert [f.id for f in scan_source(other.encode(), "t.py")[0]] == ["missing-zero-grad"]
    every = mistake.replace("# <-", "# torchwork: ignore")
    assert scan_source(every.encode(), "t.py")[0] == []
    quoted = mistake.replace("# <-", "; note = '# torchwork: ignore[missing-zero-grad]'")
    assert len(scan_source(quoted.encode(), "t.py")[0]) == 1  # in a string, not a comment


def test_the_walker_skips_environments_links_large_and_broken_files(tmp_path: Path) -> None:
    bad = CASES["missing-zero-grad"][0]
    for folder in (".venv/lib", ".git", "build", "pkg.egg-info", "src"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "train.py").write_text(bad)
    (tmp_path / "src" / "notes.txt").write_text(bad)
    (tmp_path / "huge.py").write_text("x = 1\n" * (MAX_BYTES // 6 + 1))
    (tmp_path / "broken.py").write_text("def f(:\n")
    os.symlink(tmp_path / "src" / "train.py", tmp_path / "linked.py")
    scan = scan_paths([tmp_path])
    assert [f.file.replace(os.sep, "/").rsplit("/", 2)[-2:] for f in scan.findings] == [["src", "train.py"]]
    assert scan.files == 1
    reasons = {Path(file).name: reason for file, reason in scan.skipped}
    assert "larger than" in reasons["huge.py"] and "not parsed" in reasons["broken.py"]
    with pytest.raises(ConfigError, match="no file or folder"):
        scan_paths([tmp_path / "missing"])
    with pytest.raises(ConfigError, match="no static check 'nope'"):
        scan_paths([tmp_path], checks=["nope"])


def _scan_of(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(source)
    return path


def test_sarif_has_the_2_1_0_basics(tmp_path: Path) -> None:
    scan = scan_paths([_scan_of(tmp_path, CASES["missing-zero-grad"][0] + CASES["unsafe-torch-load"][0])])
    log = json.loads(json.dumps(sarif(scan, RULES)))
    assert log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(RULE_IDS) and all(r["shortDescription"]["text"] for r in rules)
    assert {r["ruleId"] for r in run["results"]} == {"missing-zero-grad", "unsafe-torch-load"}
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note") and result["message"]["text"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"].endswith("train.py")
        assert isinstance(location["region"]["startLine"], int) and location["region"]["startLine"] >= 1
    zero_grad = next(r for r in run["results"] if r["ruleId"] == "missing-zero-grad")
    assert "to confirm" in zero_grad["message"]["text"]  # the runtime doctor has the same check


def test_github_annotations_are_workflow_commands(tmp_path: Path) -> None:
    scan = scan_paths([_scan_of(tmp_path, CASES["missing-zero-grad"][0] + CASES["unsafe-torch-load"][0])])
    lines = github(scan).splitlines()
    pattern = re.compile(r"^::(error|warning|notice) file=([^,:]+),line=(\d+),col=(\d+),title=[^,:]+::(.+)$")
    assert len(lines) == 3 and all(pattern.match(line) for line in lines), lines
    first = pattern.match(lines[0])
    assert first and first.group(1) == "error" and int(first.group(3)) == _marked(CASES["missing-zero-grad"][0])[0]
    assert "\n" not in "".join(lines) and "%0A" not in lines[0]


def test_exit_codes_and_formats_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(CASES["missing-zero-grad"][0])
    good.write_text(CASES["missing-zero-grad"][1] + CASES["unsafe-torch-load"][0])
    assert main(["doctor", "--static", str(bad)]) == 1
    assert "[missing-zero-grad]" in capsys.readouterr().out
    assert main(["doctor", "--static", str(good), "--format", "sarif"]) == 0  # warnings do not fail the build
    assert json.loads(capsys.readouterr().out)["version"] == "2.1.0"
    assert main(["doctor", "--static", str(good), str(bad), "--json"]) == 1
    assert {f["id"] for f in json.loads(capsys.readouterr().out)["findings"]} == {"missing-zero-grad",
                                                                                   "unsafe-torch-load"}
    assert main(["doctor", "--static", str(tmp_path / "nope")]) == 2
    assert "no file or folder" in capsys.readouterr().err
    assert main(["doctor", "--static", "--check", "nope", str(bad)]) == 2
    assert main(["doctor", "--format", "sarif", str(bad)]) == 2  # --format is the static scan's


def test_the_scan_and_the_help_do_not_import_torch(tmp_path: Path) -> None:
    _scan_of(tmp_path, CASES["missing-zero-grad"][0])
    code = ("import contextlib, io, sys\nfrom torchwork.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['doctor', '--static', {str(tmp_path)!r}, '--format', 'github']) == 1\n"
            "    try:\n        main(['doctor', '--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_the_examples_correct_scripts_clean_and_the_static_mistakes_found() -> None:
    scan = scan_paths([ROOT / "examples"])
    assert not scan.skipped
    errors = [f for f in scan.findings if f.severity == "error"]
    assert all("mistakes" in Path(f.file).parts and not Path(f.file).name.startswith("correct") for f in errors), errors
    expected = set()
    for script in sorted((ROOT / "examples" / "mistakes").glob("*.py")):
        for number, line in enumerate(script.read_text().splitlines(), 1):
            marker = re.search(r"# doctor: ([\w-]+)", line)
            # the runtime state-dict-mismatch judges a load by its effect; the static one only an ignored report
            if marker and marker.group(1) in RULE_IDS and marker.group(1) != "state-dict-mismatch":
                expected.add((script.name, number, marker.group(1)))
    found = {(Path(f.file).name, f.line, f.id) for f in scan.findings}
    assert expected and expected <= found, expected - found
    assert {f[2] for f in expected} >= {"missing-zero-grad", "requires-grad-attribute", "scheduler-per-batch",
                                        "dropout-in-eval", "loss-on-probabilities", "anomaly-mode"}
