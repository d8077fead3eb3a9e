"""compile=True | False | "auto": the measured decision, the model's names in checkpoints, resume across
compiled and eager, and the graph breaks / recompiles in the run's manifest.

Compiling on this CPU takes tens of seconds, so the models are tiny and the tests that compile are slow. The
decision rule on its own (no compiling): test_compiling.py.
"""

from __future__ import annotations

import glob
import json
import time

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.engine.compiling import CompileOptions
from torchwork.errors import ConfigError


def _batches(n: int = 6, rows: int = 16, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 8, generator=g), torch.randn(rows, 1, generator=g)) for _ in range(n)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))


def _trainer(model: nn.Module, **options) -> Trainer:
    return Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2), nn.MSELoss(), device="cpu",
                   progress=False, **options)


def _manifest(run_dir) -> dict:
    (path,) = glob.glob(f"{run_dir}/*/manifest.json")
    return json.loads(open(path).read())


@pytest.fixture(autouse=True)
def _one_thread_and_fresh_dynamo():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    torch.set_num_threads(previous)


def test_compile_settings_are_checked_before_any_work():
    with pytest.raises(ConfigError, match="compile='yes': choose True, False or 'auto'"):
        _trainer(_model(), compile="yes")
    with pytest.raises(ConfigError, match="rounds=2"):
        CompileOptions.of(CompileOptions("auto", rounds=2))


def _slow_backend(graph, example_inputs):
    """A backend that runs the captured graph as it is, 3 ms late: compiled is slower on purpose."""
    def run(*args):
        time.sleep(0.003)
        return graph.forward(*args)
    return run


@pytest.mark.slow
def test_auto_keeps_eager_when_compiled_is_slower_and_the_measurement_leaves_no_trace(tmp_path, capsys):
    eager = _model()
    _trainer(eager).fit(_batches(), epochs=2)
    model = _model()
    trainer = _trainer(model, compile=CompileOptions("auto", backend=_slow_backend), run_dir=tmp_path)
    trainer.fit(_batches(), epochs=2)
    assert trainer._train_model is model  # trains eager
    for mine, reference in zip(model.state_dict().values(), eager.state_dict().values()):
        assert torch.equal(mine, reference)  # weights, RNG (dropout) and grads restored after measuring
    record = _manifest(tmp_path)["compile"]
    assert record["setting"] == "auto" and record["compiled"] is False
    assert record["compiled_ms"] > record["eager_ms"] and "not faster" in record["reason"]
    assert "compile='auto': eager" in capsys.readouterr().err


class SlowOutsideCompiledCode(nn.Module):
    """20 ms of sleep in each eager forward that compiled code leaves out (Dynamo reads ``is_compiling()`` as
    True while it traces): compiled is faster on purpose, by far more than a busy machine's spread, so the
    decision does not depend on how loaded the machine is. How much Inductor really saves is measured in
    benchmarks/compile.py, not here."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            time.sleep(0.02)
        return self.linear(x)


class StopAfterFirstEpoch:
    def on_epoch_end(self, trainer, logs):
        trainer.should_stop = True


def test_auto_compiles_when_compiled_is_faster_over_the_planned_steps(tmp_path):
    torch.manual_seed(0)
    model = SlowOutsideCompiledCode()
    batches = _batches(n=4, rows=64)
    # 4 batches x 10,000 epochs planned: many steps to pay back the compile (the callback stops after one epoch)
    trainer = _trainer(model, compile=CompileOptions("auto", backend="eager"), run_dir=tmp_path,
                       callbacks=[StopAfterFirstEpoch()])
    trainer.fit(batches, epochs=10_000)
    record = _manifest(tmp_path)["compile"]
    assert record["compiled"] is True, record["reason"]
    assert record["compiled_ms"] + record["spread_ms"] < record["eager_ms"]
    assert record["break_even_step"] < record["remaining_steps"] == 40_000
    assert trainer._train_model is not model and record["graph_breaks"] == []


class ItemBreak(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if h.mean().item() > 100.0:  # a graph break, on this line
            h = h * 0.5
        return self.b(h)


@pytest.mark.slow
def test_compiled_checkpoints_hold_the_models_names_and_graph_breaks_name_the_users_line(tmp_path):
    torch.manual_seed(0)
    model = ItemBreak()
    trainer = _trainer(model, compile=CompileOptions(True, backend="eager"), run_dir=tmp_path)
    trainer.fit(_batches(), epochs=1)
    (checkpoint,) = glob.glob(f"{tmp_path}/*/checkpoints/step-*.pt")
    keys = list(torch.load(checkpoint, weights_only=True)["model"])
    assert keys == ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert not any("_orig_mod" in k for k in trainer.model.state_dict())
    record = _manifest(tmp_path)["compile"]
    line = ItemBreak.forward.__code__.co_firstlineno + 2
    (found,) = [b for b in record["graph_breaks"] if b["line"] == line]
    assert found["file"] == __file__ and "item()" in found["reason"]


@pytest.mark.slow
def test_resume_across_compiled_and_eager_and_exact_compiled_to_compiled(tmp_path):
    batches = _batches()
    straight = _model()
    _trainer(straight, compile=True).fit(batches, epochs=2)

    first = _model()
    _trainer(first, compile=True, run_dir=tmp_path / "a").fit(batches, epochs=1)
    resumed = _model()
    _trainer(resumed, compile=True, run_dir=tmp_path / "a").fit(batches, epochs=2, resume="latest")
    for mine, reference in zip(resumed.state_dict().values(), straight.state_dict().values()):
        assert torch.equal(mine, reference)  # compiled -> compiled resume is exact

    eager_first = _model()
    _trainer(eager_first, run_dir=tmp_path / "b").fit(batches, epochs=1)
    compiled_next = _model()
    history = _trainer(compiled_next, compile=True, run_dir=tmp_path / "b").fit(batches, epochs=2, resume="latest")
    assert [h["epoch"] for h in history] == [1, 2] and _manifest(tmp_path / "b")["compile"]["compiled"]
    eager_again = _model()
    history = _trainer(eager_again, run_dir=tmp_path / "b").fit(batches, epochs=3, resume="latest")
    assert [h["epoch"] for h in history] == [1, 2, 3]  # epochs are 1-based in the history
    assert not torch.equal(eager_again[0].weight, compiled_next[0].weight)  # it trained on


def _failing_backend(graph, example_inputs):
    raise RuntimeError("no C++ compiler on this machine")


@pytest.mark.slow
def test_auto_trains_on_in_eager_when_compiling_fails(tmp_path):
    model = _model()
    trainer = _trainer(model, compile=CompileOptions("auto", backend=_failing_backend), run_dir=tmp_path)
    history = trainer.fit(_batches(), epochs=1)
    assert len(history) == 1 and trainer._train_model is model
    record = _manifest(tmp_path)["compile"]
    assert record["compiled"] is False and "compiling failed" in record["reason"]
    assert "no C++ compiler on this machine" in record["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("dynamic, most_recompiles", [(None, 0), (False, 1)])
def test_recompiles_stay_at_most_one_per_batch_bucket_over_epochs_with_a_short_last_batch(
        tmp_path, dynamic, most_recompiles):
    # 40 rows in batches of 16: 16, 16 and a short 8 every epoch. The default marks the batch dimension
    # dynamic, so one graph serves both sizes; dynamic=False compiles one graph per size (two buckets).
    # threads=1: Dynamo also guards on torch's thread count, which threads="auto" would try several of.
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 8, generator=g), torch.randn(40, 1, generator=g)
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 40, 16)]
    assert [len(b[0]) for b in batches] == [16, 16, 8]
    trainer = _trainer(_model(), compile=CompileOptions(True, backend="eager", dynamic=dynamic),
                       run_dir=tmp_path, threads=1)
    trainer.fit(batches, epochs=3)
    record = _manifest(tmp_path)["compile"]
    assert record["compiled"] is True and record["recompile_limit_hit"] == []
    assert record["recompiles"] == most_recompiles, record["recompiled_functions"]


class _AlternatingTuner:
    """A threads="auto" tuner on a busy machine, as far as the compiled graph can tell: each step at
    another thread count (as while it times 1 against 2)."""

    def __init__(self) -> None:
        self.steps, self.choice = 0, None

    def before_step(self) -> None:
        torch.set_num_threads(1 + self.steps % 2)

    def after_step(self, seconds: float, samples: int) -> None:
        self.steps += 1

    def pause(self) -> None:
        pass


@pytest.mark.slow
def test_a_compiled_run_under_threads_auto_keeps_one_thread_count(tmp_path, monkeypatch):
    import torchwork.engine.threads as threads_module

    tuners: list[_AlternatingTuner] = []
    monkeypatch.setattr(threads_module, "thread_tuner", lambda *a: tuners.append(_AlternatingTuner()) or tuners[-1])
    trainer = _trainer(_model(), compile=CompileOptions(True, backend="eager"), run_dir=tmp_path, threads="auto")
    trainer.fit(_batches(), epochs=2)
    assert tuners == [] and "kept while compiled" in trainer.thread_choice.reason
    assert _manifest(tmp_path)["compile"]["recompiles"] == 0
    eager = _trainer(_model(), compile=False, threads="auto")  # not compiled: the tuner works as ever
    eager.fit(_batches(), epochs=1)
    assert len(tuners) == 1 and tuners[0].steps == 6
