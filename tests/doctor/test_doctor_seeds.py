"""The seeded-bug corpus of benchmarks/doctor_precision.py (issue 51): each seed's edits apply exactly once
to its clean script and its expected culprit line is the right one. The doctor itself runs over the corpus
in the benchmark (slow), not here. Also the fix the corpus found: a strict=False load that keeps nothing is
found on a model with BatchNorm."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork.doctor.session import diagnose

# benchmarks/ is not a package: the module is loaded from its file (registered, as its dataclass needs)
_SPEC = importlib.util.spec_from_file_location(
    "_benchmarks_doctor_seeds", Path(__file__).resolve().parents[2] / "benchmarks" / "doctor_seeds.py")
assert _SPEC is not None and _SPEC.loader is not None
seeds = sys.modules.setdefault(_SPEC.name, importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(seeds)
NAMED = seeds.named_seeds()


def _clean(seed) -> str:
    return (seeds.CORRECT / f"{seed.script}.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_seed_plants_once_into_a_script_that_parses_and_names_its_culprit_line(name: str) -> None:
    seed = NAMED[name]
    clean = _clean(seed)
    text, line = seeds.plant(seed, clean)
    assert text != clean
    ast.parse(text)  # still a script
    lines = text.splitlines()
    assert seed.culprit.strip() in lines[line - 1]
    assert sum(seed.culprit in other for other in lines) == 1


def test_the_culprit_line_is_counted_after_the_edits() -> None:
    # hand-counted in the clean scripts: a deleted line moves the culprit up, an inserted one moves it down
    clean_lines = {name: _clean(NAMED[name]).splitlines() for name in NAMED}
    step = clean_lines["mnist_style_cnn__missing-zero-grad"].index("        optimizer.step()") + 1
    assert seeds.plant(NAMED["mnist_style_cnn__missing-zero-grad"], _clean(NAMED["mnist_style_cnn__missing-zero-grad"]))[1] == step - 1
    mnist = clean_lines["mnist_style_cnn__module-requires-grad-false"]
    built = mnist.index("    model = Digits()") + 1
    assert seeds.plant(NAMED["mnist_style_cnn__module-requires-grad-false"], "\n".join(mnist) + "\n")[1] == built + 1
    gan = clean_lines["gan_bce_detached_fakes__detach-in-generator-step_2"]
    fakes = next(i for i, text in enumerate(gan, start=1) if "fakes = generator(" in text)
    assert seeds.plant(NAMED["gan_bce_detached_fakes__detach-in-generator-step_2"], "\n".join(gan) + "\n")[1] == fakes


def test_every_kind_of_the_issue_is_planted_in_a_correct_script() -> None:
    assert {seed.kind for seed in seeds.SEEDS} == set(seeds.KINDS)
    assert all((seeds.CORRECT / f"{seed.script}.py").is_file() for seed in seeds.SEEDS)
    assert len(NAMED) == len(seeds.SEEDS)


def test_an_edit_that_does_not_apply_exactly_once_is_refused() -> None:
    seed = seeds.Seed("any", "missing-zero-grad", (("zero_grad()\n", ""),), "step()")
    with pytest.raises(seeds.PlantError, match="occurs 2 times"):
        seeds.plant(seed, "opt.zero_grad()\nopt.zero_grad()\nopt.step()\n")
    with pytest.raises(seeds.PlantError, match="occurs 0 times"):
        seeds.plant(seed, "opt.step()\n")
    with pytest.raises(seeds.PlantError, match="culprit"):
        seeds.plant(seed, "opt.zero_grad()\nopt.step()\nopt.step()\n")


def test_write_planted_writes_one_script_per_seed(tmp_path: Path) -> None:
    planted = seeds.write_planted(tmp_path)
    assert set(planted) == set(NAMED)
    for seed, path, line in planted.values():
        assert path.parent == tmp_path and seed.culprit in path.read_text().splitlines()[line - 1]


# ----------------------------------------------------------------- found by the seeded corpus
def test_a_prefixed_checkpoint_loaded_with_strict_false_into_a_batchnorm_model_is_found() -> None:
    # BatchNorm does not list a missing num_batches_tracked in missing_keys: "every key missing" never held
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    saved = {"module." + k: v for k, v in nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).state_dict().items()}
    with diagnose(["state-dict-mismatch"]) as session:
        net.load_state_dict(saved, strict=False)
        line = _this_line() - 1
    assert [(f.id, f.line) for f in session.findings] == [("state-dict-mismatch", line)]
    assert "'module.'" in session.findings[0].message
    with diagnose(["state-dict-mismatch"]) as session:
        net.load_state_dict({k.removeprefix("module."): v for k, v in saved.items()}, strict=False)
    assert session.findings == [] and torch.equal(net[0].weight, saved["module.0.weight"])


def _this_line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _lbfgs_steps(clear: bool) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=3)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def closure() -> torch.Tensor:
        if clear:
            optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(3):
        optimizer.step(closure)  # line: lbfgs-step


def test_a_closure_that_never_clears_is_found_at_the_step_and_one_that_clears_is_silent() -> None:
    # the closure's gradients arrive inside step(): judged when it ends (the corpus's L-BFGS seed was missed)
    with diagnose(["missing-zero-grad"]) as session:
        _lbfgs_steps(clear=False)
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), start=1)
                if text.endswith("# line: lbfgs-step"))
    assert [(f.id, f.line) for f in session.findings] == [("missing-zero-grad", line)]
    assert "closure" in session.findings[0].message and session.findings[0].count == 2
    with diagnose(["missing-zero-grad"]) as session:
        _lbfgs_steps(clear=True)
    assert session.findings == []


def _train_by_hand(clear: bool) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(4, 1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(4):
        if clear:
            layer.zero_grad()
        ((layer(x) - y) ** 2).mean().backward()
        for param in layer.parameters():
            param.data.add_(param.grad, alpha=-0.1)  # line: by-hand


def test_an_update_by_hand_on_uncleared_gradients_is_found_at_the_update_and_a_cleared_one_is_silent() -> None:
    # no optimizer (pytorch/examples' regression): the corpus's two manual-SGD seeds were missed
    with diagnose(["missing-zero-grad"]) as session:
        _train_by_hand(clear=False)
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), start=1)
                if text.endswith("# line: by-hand"))
    assert [(f.id, f.line, f.count) for f in session.findings] == [("missing-zero-grad", line, 3)]
    with diagnose(["missing-zero-grad"]) as session:
        _train_by_hand(clear=True)
    assert session.findings == []
