"""torch.compile as a measured decision: ``Trainer(compile="auto" | True | False)``.

``True`` compiles the training forward (``torch.compile``); ``False`` (the default) does not. ``"auto"``
measures, on the first training batch and on this machine, the steady-state forward + backward time of
eager and of compiled (interleaved rounds, medians and interquartile ranges) and the compile seconds, then
compiles only when compiled is faster by more than the spread of the rounds *and* the saving over the run's
remaining steps exceeds the compile seconds (the break-even step comes before the end). Every recompile (a
new batch shape, a resumed process) pays about that again, so a saving that does not cover it keeps eager.
The measurement leaves no trace on the training: the weights, buffers (BatchNorm statistics), gradients and
RNG streams are restored afterwards, and no optimizer step runs. The decision is printed with its figures.

The model itself is never wrapped, so ``trainer.model.state_dict()`` and every checkpoint hold the user's
names (no ``_orig_mod.``) and a run resumes compiled from an eager checkpoint and the reverse. While training
compiled, the graph breaks (with the user's file:line and the reason) and the recompiles (how many, why,
and whether ``torch._dynamo.config.recompile_limit`` made the frame fall back to eager) are recorded and
written to the run's ``manifest.json`` under ``"compile"``.

Shapes are bucketed so that recompiles stay at most one per bucket: with ``dynamic=None`` (the default) the
batch dimension of every tensor the compiled model is called with is marked dynamic
(``torch._dynamo.maybe_mark_dynamic``) before the call, so the first graph already serves every batch size
and an epoch's short last batch costs no recompile (each recompile costs about the compile seconds again).
Other dimensions (a text model's length) are left to the loader's buckets (``torchwork.data`` length
buckets): Dynamo compiles the first length statically and, at the second, once more with that dimension
dynamic. A batch of one row is the exception Dynamo makes (sizes 0 and 1 are always specialised): one more
graph. ``dynamic=False`` keeps every shape static (a graph per batch size), ``dynamic=True`` makes all dynamic.

Example:
    >>> plan = CompileOptions.of("auto")
    >>> plan.enabled, plan.backend
    ('auto', 'inductor')
    >>> CompileOptions.of("yes")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: compile='yes': choose True, False or 'auto' (or a CompileOptions).
    >>> decide(eager=[0.010] * 5, compiled=[0.012] * 5, compile_seconds=30.0, remaining_steps=10_000)[0]
    False
    >>> decide(eager=[0.010] * 5, compiled=[0.005] * 5, compile_seconds=30.0, remaining_steps=10_000)[0]
    True
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from torchwork.doctor.compile_watch import CompileWatch
from torchwork.errors import ConfigError

if TYPE_CHECKING:
    from torchwork.engine.precision import PrecisionPlan
    from torchwork.engine.step import ForwardLoss


@dataclass(frozen=True)
class CompileOptions:
    """How the Trainer compiles: ``enabled`` is True, False or ``"auto"``; ``backend``, ``mode`` and
    ``dynamic`` go to ``torch.compile``; ``rounds`` is the number of interleaved timing rounds of ``"auto"``."""

    enabled: bool | str = False
    backend: Any = "inductor"
    mode: str | None = None
    dynamic: bool | None = None
    rounds: int = 5

    @classmethod
    def of(cls, value: Any) -> CompileOptions:
        """Check a ``compile=`` setting before any work starts."""
        if isinstance(value, CompileOptions):
            options = value
        elif value is True or value is False or value == "auto":
            options = cls(enabled=value)
        else:
            raise ConfigError(f"compile={value!r}: choose True, False or 'auto' (or a CompileOptions).")
        if not (options.enabled is True or options.enabled is False or options.enabled == "auto"):
            raise ConfigError(f"CompileOptions(enabled={options.enabled!r}): choose True, False or 'auto'.")
        if isinstance(options.rounds, bool) or not isinstance(options.rounds, int) or options.rounds < 3:
            raise ConfigError(f"CompileOptions(rounds={options.rounds!r}): at least 3 timing rounds (an integer), "
                              "so that their spread means something.")
        return options


def _spread(samples: Sequence[float]) -> float:
    quartiles = statistics.quantiles(samples, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]


def decide(eager: Sequence[float], compiled: Sequence[float], compile_seconds: float,
           remaining_steps: int | None) -> tuple[bool, str, dict[str, Any]]:
    """(compile?, the reason, the figures) from per-step seconds of interleaved rounds."""
    eager_s, compiled_s = statistics.median(eager), statistics.median(compiled)
    spread = max(_spread(eager), _spread(compiled))
    saving = eager_s - compiled_s
    figures: dict[str, Any] = {
        "eager_ms": round(eager_s * 1e3, 4), "compiled_ms": round(compiled_s * 1e3, 4),
        "spread_ms": round(spread * 1e3, 4), "speedup": round(eager_s / compiled_s, 3) if compiled_s else None,
        "compile_seconds": round(compile_seconds, 2), "remaining_steps": remaining_steps, "break_even_step": None}
    timing = (f"eager {eager_s * 1e3:.3f} ms/step, compiled {compiled_s * 1e3:.3f} ms/step (spread "
              f"{spread * 1e3:.3f} ms), compiling took {compile_seconds:.1f} s")
    if saving <= spread:
        return False, f"{timing}: compiled is not faster by more than the spread, so eager is kept", figures
    break_even = math.ceil(compile_seconds / saving)
    figures["break_even_step"] = break_even
    if remaining_steps is None:
        return False, (f"{timing}: it pays after {break_even:,} steps, but the number of remaining steps is "
                       "unknown (a loader without len()), so eager is kept; pass compile=True to compile"), figures
    if break_even >= remaining_steps:
        return False, (f"{timing}: it pays only after {break_even:,} steps and {remaining_steps:,} remain, so "
                       "eager is kept"), figures
    return True, (f"{timing}: it pays after {break_even:,} of the {remaining_steps:,} remaining steps, so the "
                  "model is compiled"), figures


def mark_batch_dynamic(value: Any) -> None:
    """Mark dimension 0 of every tensor in ``value`` (a tensor, or tuples, lists and dicts of them) dynamic
    for ``torch.compile``, when it has one (a scalar or a batch of one row is left as it is)."""
    if isinstance(value, torch.Tensor):
        if value.ndim and value.shape[0] > 1:
            torch._dynamo.maybe_mark_dynamic(value, 0)
    elif isinstance(value, (tuple, list)):
        for item in value:
            mark_batch_dynamic(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            mark_batch_dynamic(item)


class BatchDynamic(nn.Module):
    """A compiled module called with the batch dimension of its inputs marked dynamic (one graph for every
    batch size, the short last batch included). It holds the compiled module without registering it, so its
    own ``state_dict()`` is empty and nothing of it reaches a checkpoint."""

    compiled: Callable[..., Any]

    def __init__(self, compiled: Callable[..., Any]) -> None:
        super().__init__()
        self.__dict__["compiled"] = compiled  # not a submodule: the model's names stay the model's

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        mark_batch_dynamic(args)
        mark_batch_dynamic(kwargs)
        return self.compiled(*args, **kwargs)


def compile_batch_dynamic(module: nn.Module, backend: Any = "inductor", mode: str | None = None) -> nn.Module:
    """``torch.compile(module)`` called with its inputs' batch dimension marked dynamic (:class:`BatchDynamic`):
    what the Trainer trains with by default, and what ``torchwork verify --compile`` and ``torchwork serve
    --compile`` run."""
    return BatchDynamic(torch.compile(module, backend=backend, mode=mode))


def _snapshot(model: nn.Module) -> dict[str, Any]:
    state = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
    grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
    rng = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    return {"state": state, "grads": grads, "rng": rng}


def _restore(model: nn.Module, snapshot: dict[str, Any]) -> None:
    with torch.no_grad():
        for key, value in model.state_dict(keep_vars=True).items():
            value.copy_(snapshot["state"][key])
    for parameter, grad in zip(model.parameters(), snapshot["grads"]):
        parameter.grad = grad
    torch.set_rng_state(snapshot["rng"]["cpu"])
    if snapshot["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state_all(snapshot["rng"]["cuda"])


class Compiler:
    """What the Trainer asks about compiling: the module to train with, decided at the first step."""

    def __init__(self, setting: Any, distributed: bool = False) -> None:
        self.options = CompileOptions.of(setting)
        if distributed and self.options.enabled == "auto":
            raise ConfigError("compile='auto' measures on each rank, and ranks could decide differently (and "
                              "time different numbers of collectives): under DDP pass compile=True or False.")
        self.planned_steps: int | None = None
        self.decision: dict[str, Any] | None = None
        self.watch: CompileWatch | None = None

    @property
    def pending(self) -> bool:
        """True until the first training step has decided (never for compile=False)."""
        return self.options.enabled is not False and self.decision is None

    def _compile(self, module: nn.Module) -> nn.Module:
        options = self.options
        if options.dynamic is None:
            return compile_batch_dynamic(module, options.backend, options.mode)
        return cast(nn.Module, torch.compile(module, backend=options.backend, mode=options.mode,
                                             dynamic=options.dynamic))

    def choose(self, module: nn.Module, model: nn.Module, fwd_bwd: Callable[[nn.Module], Any],
               steps_done: int, synchronize: Callable[[], None] = lambda: None) -> nn.Module:
        """The module to train with: ``module`` compiled or not (``fwd_bwd(m)`` runs forward + backward of
        the first batch through ``m``; ``model`` is the unwrapped module whose state is restored)."""
        compiled = self._compile(module)
        self.watch = CompileWatch()
        self.watch.start()
        if self.options.enabled is True:
            self.decision = {"setting": True, "compiled": True, "reason": "compile=True"}
            return compiled
        remaining = None if self.planned_steps is None else max(0, self.planned_steps - steps_done)
        print("compile='auto': measuring eager and compiled steps on the first batch (compiling takes a while)",
              file=sys.stderr, flush=True)
        snapshot = _snapshot(model)
        try:
            eager, compiled_times, compile_seconds = self._measure(module, compiled, fwd_bwd, synchronize)
        except Exception as error:  # noqa: BLE001 - whatever torch.compile raises, "auto" trains on in eager
            cause = getattr(error, "inner_exception", None) or error.__cause__ or error  # the backend's own error
            text = str(cause).strip().splitlines()[0][:300] if str(cause).strip() else ""
            reason = f"compiling failed ({type(cause).__name__}: {text}), so eager is kept"
            self.decision = {"setting": "auto", "compiled": False, "reason": reason}
            print(f"compile='auto': {reason}", file=sys.stderr, flush=True)
            return module
        finally:
            _restore(model, snapshot)
        use, reason, figures = decide(eager, compiled_times, compile_seconds, remaining)
        self.decision = {"setting": "auto", "compiled": use, "reason": reason, **figures}
        print(f"compile='auto': {reason}", file=sys.stderr, flush=True)
        return compiled if use else module

    def _measure(self, eager: nn.Module, compiled: nn.Module, fwd_bwd: Callable[[nn.Module], Any],
                 synchronize: Callable[[], None]) -> tuple[list[float], list[float], float]:
        def timed(module: nn.Module, repeat: int) -> float:
            synchronize()
            started = time.perf_counter()
            for _ in range(repeat):
                fwd_bwd(module)
            synchronize()
            return (time.perf_counter() - started) / repeat

        timed(eager, 2)  # warm-up
        compile_seconds = timed(compiled, 1)
        timed(compiled, 2)  # a second compile for what the first call changed (e.g. a dynamic batch) lands here
        one = timed(eager, 3)
        repeat = max(1, min(50, math.ceil(0.05 / max(one, 1e-6))))  # each sample at least ~50 ms
        samples: dict[str, list[float]] = {"eager": [], "compiled": []}
        for round_index in range(self.options.rounds):
            order = [("eager", eager), ("compiled", compiled)]
            for name, module in order if round_index % 2 == 0 else order[::-1]:
                samples[name].append(timed(module, repeat))
        return samples["eager"], samples["compiled"], compile_seconds

    def report(self) -> dict[str, Any] | None:
        """The decision and, when compiled, the graph breaks and recompiles so far (for the manifest)."""
        if self.decision is None:
            return None
        out = dict(self.decision)
        if self.watch is not None and out.get("compiled"):
            out.update(self.watch.report())
        return out

    def finish(self, run_path: Path | None) -> None:
        """Stop watching and write the report into the run's manifest.json (when there is a run folder)."""
        report = self.report()
        if self.watch is not None:
            self.watch.stop()
        if report is not None and run_path is not None:
            record_in_manifest(Path(run_path), report)


def record_in_manifest(run_path: Path, report: dict[str, Any]) -> None:
    """Set ``"compile"`` in ``run_path/manifest.json`` (atomically; nothing when there is no manifest)."""
    from torchwork.files import write_json
    from torchwork.runs.folder_files import load_json, read_run_file
    from torchwork.runs.readback import MAX_MANIFEST_BYTES

    path = run_path / "manifest.json"
    if not path.is_file():
        return
    # bounded, a regular file of the run: one swapped for a FIFO or a link out is a ConfigError, not a hang
    manifest = load_json(read_run_file(run_path, "manifest.json", MAX_MANIFEST_BYTES), path)
    manifest["compile"] = report
    write_json(path, manifest)


def forward_backward(forward: ForwardLoss, precision: PrecisionPlan, model: nn.Module,
                     batch: Any) -> Callable[[nn.Module], None]:
    """``fwd_bwd(module)``: the training step's ``forward`` and loss (under ``precision``'s autocast) and
    backward of ``batch`` through ``module``, ``model``'s gradients dropped afterwards (the measurement of
    ``compile="auto"``)."""

    def run(module: nn.Module) -> None:
        training_module = forward.model
        forward.model = module
        try:
            with precision.autocast():
                loss, _ = forward(batch)
            precision.backward(loss)
        finally:
            forward.model = training_module
        for parameter in model.parameters():
            parameter.grad = None

    return run


def planned_steps(loader: Any, epochs: int, accumulate: int) -> int | None:
    """Optimizer steps in ``epochs`` epochs of ``loader`` (None when it has no len())."""
    try:
        batches = len(loader)
    except TypeError:
        return None
    return epochs * math.ceil(batches / max(1, accumulate))
