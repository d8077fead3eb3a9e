"""torch.compile at inference, as a measured decision: ``torchwork serve --compile auto|on|off``.

What compiles is the artifact's ``pt2`` variant, the exported program that PyTorch runs eagerly (the other
variants are ONNX Runtime sessions, TorchScript or an Inductor library compiled ahead of time), with its
batch dimension marked dynamic so that one graph serves every batch size. ``on`` compiles it; ``auto``
times eager and compiled at batch 1 and batch 32 on the artifact's example inputs (interleaved rounds,
medians and interquartile ranges) and compiles only when compiled is faster at both by more than the spread
of the rounds; ``off``, the default, serves as before. The compile seconds are paid once, when the model
loads; the decision, its figures and the reason are returned (the server logs them). On this CPU compiled
inference can win where compiled training loses (benchmarks/compile.py): a server is a long run of forwards.

Example:
    >>> compile_setting("auto"), compile_setting("off")
    ('auto', 'off')
    >>> compile_setting("yes")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --compile 'yes': choose auto, on or off.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from typing import TYPE_CHECKING, Any

from torchwork.deploy.choice import spread
from torchwork.deploy.contents import load_examples
from torchwork.deploy.runtime import load_pt2, torch_runner
from torchwork.deploy.trust import safe_member
from torchwork.deploy.verification import first_rows, interleaved_samples
from torchwork.engine.compiling import compile_batch_dynamic
from torchwork.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.deploy.loaded import LoadedArtifact

SERVE_COMPILE = ("off", "on", "auto")
TIMED_BATCHES = (1, 32)


def compile_setting(value: str) -> str:
    """Check a ``--compile`` value before anything loads."""
    if value not in SERVE_COMPILE:
        raise ConfigError(f"--compile {value!r}: choose auto, on or off.")
    return value


def compile_artifact(artifact: LoadedArtifact, setting: str, *, rounds: int = 7,
                     backend: Any = "inductor") -> dict[str, Any]:
    """Compile ``artifact``'s pt2 program as ``setting`` says (swapping the runner it serves with) and
    return the decision: ``{"setting", "compiled", "reason"}`` and, when measured, the figures."""
    compile_setting(setting)
    if setting == "off":
        return {"setting": "off", "compiled": False, "reason": "--compile off"}
    if artifact.variant != "pt2":
        if setting == "on":
            raise ConfigError(f"--compile on compiles an artifact's pt2 variant, and {artifact.directory} serves "
                              f"{artifact.variant!r}: add --variant pt2 (or leave --compile off).")
        return {"setting": "auto", "compiled": False,
                "reason": f"the artifact serves {artifact.variant!r}, not its pt2 program: nothing to compile"}
    manifest = artifact.manifest
    program = load_pt2(safe_member(artifact.directory, manifest.variants["pt2"].file, "variant 'pt2'"))
    eager = torch_runner(program.module())
    compiled = torch_runner(compile_batch_dynamic(program.module(), backend))
    examples = load_examples(artifact.directory, manifest)
    sizes = (manifest.static_batch,) if manifest.static_batch else TIMED_BATCHES
    started = time.perf_counter()
    for size in sizes:  # compiles here, not at the first request
        compiled(first_rows(examples, size))
    compile_seconds = time.perf_counter() - started
    if setting == "on":
        artifact.run_model = compiled
        return {"setting": "on", "compiled": True, "reason": "--compile on",
                "compile_seconds": round(compile_seconds, 2)}
    figures: dict[str, Any] = {"compile_seconds": round(compile_seconds, 2)}
    wins = []
    for size in sizes:
        batch = first_rows(examples, size)
        once = time.perf_counter()
        eager(batch)
        repeat = max(1, min(200, math.ceil(0.02 / max(time.perf_counter() - once, 1e-6))))  # samples of ~20 ms
        samples = interleaved_samples({"eager": functools.partial(eager, batch), "compiled": functools.partial(compiled, batch)},
                                      rounds, repeat=repeat, settle_s=0.0)
        eager_s, compiled_s = statistics.median(samples["eager"]), statistics.median(samples["compiled"])
        noise = max(spread(samples["eager"]), spread(samples["compiled"]))
        figures[f"batch_{size}"] = {"eager_ms": round(eager_s * 1e3, 4), "compiled_ms": round(compiled_s * 1e3, 4),
                                    "spread_ms": round(noise * 1e3, 4)}
        wins.append(compiled_s + noise < eager_s)
    timing = "; ".join(f"batch {size}: eager {figures[f'batch_{size}']['eager_ms']:.3f} ms, compiled "
                       f"{figures[f'batch_{size}']['compiled_ms']:.3f} ms (spread "
                       f"{figures[f'batch_{size}']['spread_ms']:.3f} ms)" for size in sizes)
    use = all(wins)
    if use:
        artifact.run_model = compiled
    reason = (f"{timing}; compiling took {compile_seconds:.1f} s: "
              + ("compiled is faster beyond the spread at every batch size timed, so it serves" if use else
                 "compiled is not faster beyond the spread at every batch size timed, so eager serves"))
    return {"setting": "auto", "compiled": use, "reason": reason, **figures}
