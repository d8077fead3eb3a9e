"""Verify an artifact: eager and every exported variant on real held-out inputs, side by side.

The eager reference is, in order: the ``model`` you pass (its architecture; the artifact's weights are
loaded into a copy when they differ), else the artifact's ``model.pt2`` program run by PyTorch (checked
first against ``weights.safetensors``). The CLI, which has no Python model, uses the second.

Latency (batch 1) and throughput (batch 64) are measured interleaved (every round times a block of calls of
each variant, in a rotating order, each block after a pause of :data:`SETTLE_S`) and reported as ratios to
the reference, so machine noise hits all of them alike. The pause is the timing rule of every speed table:
ONNX Runtime's threads (and OpenMP's, after torch) spin for a while after a call, and a call of another
runtime timed in that while runs slower (an eager MiniLM at batch 1: 363 ms right after ONNX Runtime, 18 ms
after a pause).
Held-out rows of different preprocessed sizes (texts) go through parity in chunks of like length, each
padded on its own (:mod:`torchwork.deploy.parity_inputs`); the timings use one batch padded to the longest.
Timings cover the model only; preprocessing is the same for every variant. The variant to deploy is chosen
by :func:`torchwork.deploy.choice.choose_variant`: the most exact one unless another is measurably faster
(beyond the spread of the rounds) and checked on enough real inputs.

Example:
    >>> report = verify("artifacts/digits", rounds=5)         # doctest: +SKIP
    >>> report["ok"], report["deploy"]                        # doctest: +SKIP
    (True, 'onnx')
"""

from __future__ import annotations

import copy
import functools
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from torchwork.arguments import check_flag, name_list
from torchwork.deploy import progress
from torchwork.deploy.choice import MIN_PARITY_ROWS, MIN_TIMING_ROUNDS, choose_variant, spread
from torchwork.deploy.contents import load_examples, load_preprocess, load_samples, weights_of
from torchwork.deploy.loaded import variant_runner
from torchwork.deploy.manifest import Manifest, read_manifest, variant_format
from torchwork.deploy.parity import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    check_tolerances,
    compare,
    first_line,
    non_finite_rows,
    within_tolerance,
)
from torchwork.deploy.parity_inputs import OrderedRows, length_ordered, run_ordered
from torchwork.deploy.runtime import CHUNK, Runner, load_pt2, run_in_chunks, torch_runner
from torchwork.deploy.tensors import as_input_tuple, check_inputs
from torchwork.deploy.trust import may_load, package_trust, safe_member, why_not_loaded
from torchwork.errors import ConfigError, ExportError
from torchwork.threads import check_threads


def first_rows(inputs: tuple[Any, ...], count: int) -> tuple[Any, ...]:
    """``count`` rows of each input tensor, from the first, wrapping around when the inputs hold fewer."""
    import torch

    index = torch.arange(count) % inputs[0].shape[0]
    return tuple(t[index] for t in inputs)


SETTLE_S = 0.3  # the pause before each timed block, so the previous runtime's spinning threads have stopped
BLOCK_S = 0.25  # a batch-64 block ends after the call that brings it to this long


def interleaved_seconds(calls: dict[str, Callable[[], Any]], rounds: int, repeat: int = 1,
                        warmup: int = 2, settle_s: float = SETTLE_S) -> dict[str, float]:
    """Median seconds per call of each function, timed in interleaved rounds (rotating order)."""
    samples = interleaved_samples(calls, rounds, repeat, warmup, settle_s)
    return {name: statistics.median(values) for name, values in samples.items()}


def interleaved_samples(calls: dict[str, Callable[[], Any]], rounds: int, repeat: int = 1,
                        warmup: int = 2, settle_s: float = SETTLE_S, block_s: float | None = None
                        ) -> dict[str, list[float]]:
    """Seconds per call of each function in every round: each round times a block of ``repeat`` calls of
    each, in a rotating order, each block ``settle_s`` after the previous one ended. ``block_s``: a block
    ends sooner, after the call that brings it to that many seconds (a call that long is timed well alone;
    a transformer's eager batch of 64 takes most of a second).

    Example:
        >>> seconds = interleaved_samples({"a": lambda: sum(range(100)), "b": lambda: None}, 3, settle_s=0)
        >>> {name: len(values) for name, values in seconds.items()}
        {'a': 3, 'b': 3}
    """
    for _ in range(warmup):
        for call in calls.values():
            call()
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(max(1, rounds)):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            call = calls[name]
            if settle_s:
                time.sleep(settle_s)
            started = time.perf_counter()
            done = 0
            while done < repeat:
                call()
                done += 1
                if block_s is not None and time.perf_counter() - started >= block_s:
                    break
            samples[name].append((time.perf_counter() - started) / done)
        progress.rows(round_index + 1)
    return samples


def _reference_module(model: Any, root: Path, manifest: Manifest) -> Any:
    """The user's module when it holds the artifact's weights, else a copy with them loaded."""
    import torch

    weights = weights_of(root, manifest)
    if any(t.device.type != "cpu" for t in [*model.parameters(), *model.buffers()]):
        model = copy.deepcopy(model).cpu()  # artifacts run on the CPU; compare like with like
    state = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    if state.keys() == weights.keys() and all(torch.equal(state[k], weights[k]) for k in state):
        return model
    missing, unexpected = sorted(weights.keys() - state.keys()), sorted(state.keys() - weights.keys())
    if missing or unexpected:
        raise ExportError(f"the model passed to verify does not match artifact {root}: weights the model lacks "
                          f"{missing[:5]}, model entries the artifact lacks {unexpected[:5]}. Pass an instance of "
                          f"the exported architecture ({manifest.model.get('class')}).")
    reference = copy.deepcopy(model).cpu()
    reference.load_state_dict(weights)
    return reference


def _pt2_reference(root: Path, manifest: Manifest) -> Any:
    import torch

    program = load_pt2(safe_member(root, manifest.variants["pt2"].file, "variant 'pt2'"))
    weights = weights_of(root, manifest)
    for name, value in program.state_dict.items():
        if name in weights and not torch.equal(value.detach().cpu(), weights[name]):
            raise ExportError(f"artifact {root}: the pt2 program's {name!r} differs from weights.safetensors, so "
                              "the artifact's files do not come from one export. Re-export the model.")
    return program.module()


def _model_inputs(root: Path, manifest: Manifest, preprocess: Any, inputs: Any,
                  targets: Any) -> tuple[tuple[Any, ...], Any, str, Any]:
    """(the model's input tensors, the targets, where the inputs came from, the raw rows when preprocessed)."""
    if inputs is not None:
        raw, source = inputs, "inputs passed to verify"
    else:
        bundled = load_samples(root, manifest)
        if bundled is not None:
            raw, bundled_targets = bundled
            targets = bundled_targets if targets is None else targets
            source = "held-out samples bundled at export"
        else:
            examples = load_examples(root, manifest)
            return (examples, targets, "the export's example inputs (not held-out data: pass inputs= or "
                    "export with samples=)", None)
    rows = raw if preprocess is not None else None
    if preprocess is not None:
        raw = preprocess(raw)
    tensors = check_inputs(as_input_tuple(raw, "inputs"), manifest.inputs, any_batch=True)
    if targets is not None:
        import torch

        targets = torch.as_tensor(targets).long()
        if targets.shape[0] != tensors[0].shape[0]:
            raise ConfigError(f"{targets.shape[0]} targets for {tensors[0].shape[0]} inputs.")
    return tensors, targets, source, rows


def verify(artifact_dir: str | os.PathLike[str], model: Any = None, inputs: Any = None, targets: Any = None, *,
           variants: Sequence[str] | None = None, atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL,
           tolerance: float = 0.01, rounds: int = 20, threads: int | None = None, torch_ao: bool = False,
           trust: Iterable[str] = (), cpp: bool = False,
           cpp_cache: str | os.PathLike[str] | None = None, compile: bool = False,
           reference_outputs: Any = None) -> dict[str, Any]:
    """Compare every variant of an artifact with eager on real inputs; ``report["ok"]`` is False on failure.

    Args:
        artifact_dir: the directory written by :func:`torchwork.deploy.export`.
        model: the eager model (any instance of the exported architecture); default: the pt2 program.
        inputs, targets: raw held-out inputs (through the artifact's preprocessing) and their labels;
            default: the samples bundled at export, else the example inputs (said in the report).
        variants: names to check (default: all in the artifact).
        atol, rtol: parity tolerance of float variants, ``|out - eager| <= atol + rtol * |eager|``.
        tolerance: accuracy (or top-1 agreement, without targets) a quantized variant may lose.
        rounds: timing rounds (interleaved). threads: torch and ONNX Runtime threads (default: torch's).
        torch_ao: also measure torch.ao dynamic INT8 (deprecated, not exportable; needs ``model``).
        trust: module prefixes, besides ``torchwork``, allowed for the artifact's preprocessor class; and
            the words that load a variant that runs as code without naming it in ``variants``:
            ``"torchscript"`` (a TorchScript program), ``"native"`` (a ``pt2-aoti`` native library).
            Left out, such a variant is listed under ``not_loaded`` with the reason.
        cpp: also build the C++ runner (cached in ``cpp_cache``, see :mod:`torchwork.deploy.cpp_runner`), run
            the artifact's ``pt2-aoti`` (else TorchScript) variant with it and add a ``cpp`` row (asking for
            it is the consent to run that file, trusted or not).
        compile: also run the reference under ``torch.compile`` (Inductor, batch dimension dynamic) and add a
            ``compiled`` row: parity and speed against eager, its compile seconds. It is not a file of the
            artifact, so it is never the one to deploy (``torchwork serve --compile`` serves it).
        reference_outputs: the reference's outputs on the held-out rows, already computed (a tensor or a
            tuple of tensors, rows in the inputs' order; e.g. the evaluation's): used instead of running the
            reference over every row again, after a check against the reference on the first rows.
    """
    import torch

    check_tolerances(atol, rtol, tolerance, rounds)
    threads = check_threads(threads)
    variants = name_list(variants, "variants")  # "onnx" asked for the variants 'o', 'n' and 'x'
    trusted = name_list(trust, "trust") or ()  # trust="mypkg" trusted the prefixes 'm', 'y', ...
    torch_ao, cpp, compile = (check_flag(torch_ao, "torch_ao"), check_flag(cpp, "cpp"),
                              check_flag(compile, "compile"))  # compile="no" compiled
    root = Path(artifact_dir)
    manifest = read_manifest(root)
    names, skipped, trust = _chosen_variants(root, manifest, variants, trusted)
    preprocess = load_preprocess(root, manifest, trust)
    model_inputs, targets, source, rows = _model_inputs(root, manifest, preprocess, inputs, targets)
    ordered = (length_ordered(rows, preprocess, manifest.inputs, manifest.static_batch or CHUNK)
               if rows is not None else None)
    threads = threads or torch.get_num_threads()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    modes = None
    try:
        if model is not None:
            modes = [m.training for m in model.modules()]
        reference_module, reference_name, reference_label = _reference(model, root, manifest)
        runners, kinds = _runners(root, manifest, names, reference_name, reference_module, threads)
        if torch_ao:
            _add_torch_ao(runners, kinds, reference_module, model)
        static_batch = manifest.static_batch
        compile_seconds, failed = None, None
        if compile:
            compile_seconds, failed = _add_compiled(runners, kinds, reference_module, model_inputs, static_batch)
        timing = (_timing_inputs(rows, preprocess, manifest.inputs, ordered)
                  if ordered is not None and not static_batch else None)
        given = None if reference_outputs is None else _given_outputs(reference_outputs, model_inputs)
        report = _measure(runners, kinds, model_inputs, targets, atol, rtol, tolerance, rounds, static_batch,
                          ordered, timing, given)
        if compile_seconds is not None:
            report["variants"]["compiled"]["compile_seconds"] = compile_seconds
        if failed is not None:
            report["variants"]["compiled"] = failed
        if cpp:
            report["variants"]["cpp"] = _cpp_row(root, manifest, runners[reference_name], report, model_inputs,
                                                 targets, atol, rtol, rounds, threads, cpp_cache)
    finally:
        torch.set_num_threads(previous_threads)
        if modes is not None:
            for module, mode in zip(model.modules(), modes):
                module.training = mode
    deploy = _choose(report, manifest, int(model_inputs[0].shape[0]))
    report.update(
        ok=all(r["ok"] for r in report["variants"].values() if r["kind"] not in ("comparison", "compiled")),
        artifact=str(root), reference=reference_label,
        inputs={"source": source, "count": int(model_inputs[0].shape[0]), "preprocessed": preprocess is not None,
                "targets": targets is not None, "parity_padding": report.pop("parity_padding"),
                "timing_inputs": report.pop("timing_inputs")},
        threads=threads, tolerance={"atol": atol, "rtol": rtol, "accuracy": tolerance},
        deploy=deploy,
        deploy_rule=f"the most exact variant that passes parity, unless another passes it on >= {MIN_PARITY_ROWS} "
                    f"real inputs, stays within {tolerance:g} of the reference's "
                    f"{'accuracy' if targets is not None else 'top-1 predictions'}, and is faster at batch 64 or at "
                    "batch 1 by more than the spread (IQR) of >= "
                    f"{MIN_TIMING_ROUNDS} timing rounds, and slower at neither beyond it",
        refused_at_export=manifest.refused, advice=manifest.advice, not_loaded=skipped)
    return report


def _chosen_variants(root: Path, manifest: Manifest, variants: Sequence[str] | None,
                     trust: tuple[str, ...]) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    """(the variants to load, those left unloaded with the reason, the preprocessor's trusted prefixes) for
    verify's ``variants`` and ``trust``: a variant that runs as code loads when ``variants`` names it or
    ``trust`` holds its word (:func:`torchwork.deploy.trust.may_load`)."""
    names = [n for n in manifest.variants if variants is None or n in variants]
    skipped = {n: why_not_loaded(variant_format(n)) for n in names
               if not may_load(variant_format(n), trust, named=variants is not None)}
    names = [n for n in names if n not in skipped]
    if variants is not None and set(variants) - set(manifest.variants):
        raise ConfigError(f"artifact {root} has no variant(s) {sorted(set(variants) - set(manifest.variants))}; "
                          f"it has {sorted(manifest.variants)}.")
    return names, skipped, package_trust(trust)


def _reference(model: Any, root: Path, manifest: Manifest) -> tuple[Any, str, str]:
    """(the eager reference module, its row's name, what it is in words): the model passed, else the pt2 program."""
    if model is not None:
        return _reference_module(model, root, manifest).eval(), "eager", "eager model passed to verify"
    if "pt2" in manifest.variants:
        return _pt2_reference(root, manifest), "pt2", "the artifact's pt2 program run eagerly by PyTorch"
    raise ExportError(f"artifact {root} has no pt2 program to serve as the eager reference. Verify it from "
                      "Python with verify(path, model=YourModel()), or re-export with 'pt2' in formats.")


def _runners(root: Path, manifest: Manifest, names: list[str], reference_name: str, reference_module: Any,
             threads: int) -> tuple[dict[str, Runner], dict[str, str]]:
    """A runner per row (the reference first, then each variant loaded: ``names``, already allowed by
    :func:`_chosen_variants`) and each row's kind."""
    runners: dict[str, Runner] = {reference_name: torch_runner(reference_module)}
    kinds = {reference_name: "reference"}
    for name in names:
        if name == reference_name:
            continue
        runners[name] = variant_runner(root, manifest, name, threads, trusted=True)
        kinds[name] = "quantized" if name.endswith("int8") else "exact"
    return runners, kinds


def _add_torch_ao(runners: dict[str, Runner], kinds: dict[str, str], reference_module: Any, model: Any) -> None:
    """The ``torch-ao-int8`` comparison row: torch.ao dynamic INT8 of the reference (needs the eager model)."""
    if model is None:
        raise ConfigError("torch_ao=True measures torch.ao dynamic quantization of the eager model: pass "
                          "model=.")
    from torchwork.deploy.quantize import torch_dynamic_int8

    runners["torch-ao-int8"] = torch_runner(torch_dynamic_int8(reference_module))
    kinds["torch-ao-int8"] = "comparison"


def _add_compiled(runners: dict[str, Runner], kinds: dict[str, str], reference_module: Any, inputs: tuple[Any, ...],
                  static_batch: int | None) -> tuple[float | None, dict[str, Any] | None]:
    """The ``compiled`` row's runner: (its compile seconds, None), or (None, the row of its failure)."""
    try:
        runners["compiled"], compile_seconds = _compiled_runner(reference_module, inputs, static_batch)
    except Exception as error:  # noqa: BLE001 - whatever the backend raises is the row's finding
        return None, {"kind": "compiled", "ok": False, "problem": f"torch.compile failed: {first_line(error)}"}
    kinds["compiled"] = "compiled"
    return compile_seconds, None


def _choose(report: dict[str, Any], manifest: Manifest, count: int) -> str | None:
    """The variant to deploy, each variant's file size and the reason it was or was not chosen written into
    its row (the timing rounds leave the report)."""
    for name, row in report["variants"].items():
        if name in manifest.variants:
            row["bytes"] = manifest.variant_bytes(name)
    deploy, reasons = choose_variant({n: r for n, r in report["variants"].items() if n in manifest.variants},
                                     report.pop("timing_rounds"), count, report.pop("latency_rounds"))
    for name, reason in reasons.items():
        report["variants"][name]["choice"] = reason
    return deploy


def _compiled_runner(module: Any, inputs: tuple[Any, ...], static_batch: int | None) -> tuple[Runner, float]:
    """The reference under torch.compile, and the seconds its first calls (batch 1 and 64) took to compile."""
    from torchwork.engine.compiling import compile_batch_dynamic

    run = torch_runner(compile_batch_dynamic(module))
    progress.stage("compiling the reference with torch.compile (Inductor)")
    started = time.perf_counter()
    for size in (static_batch,) if static_batch else (1, 64):
        run(first_rows(inputs, size))
    return run, time.perf_counter() - started


def _cpp_row(root: Path, manifest: Manifest, reference: Runner, report: dict[str, Any], inputs: tuple[Any, ...],
             targets: Any, atol: float, rtol: float, rounds: int, threads: int,
             cache: str | os.PathLike[str] | None) -> dict[str, Any]:
    from torchwork.deploy.cpp_runner import cpp_row

    reference_name = next(n for n, r in report["variants"].items() if r["kind"] == "reference")
    progress.stage("the reference on the held-out inputs (for the C++ runner)", variant=reference_name,
                   batch=manifest.static_batch or CHUNK, total=int(inputs[0].shape[0]))
    expected = run_in_chunks(reference, inputs, manifest.static_batch)
    return cpp_row(root, manifest.variants, inputs, expected, report["variants"][reference_name], atol, rtol,
                   rounds, threads, manifest.static_batch, cache, targets)


TIMING_BATCH = 64
# Rows of varied sizes are timed at batch 1 on this many held-out rows around the median size, one call each in
# turn. One row, as before, stood for all: if INT8 is unsure of it, every timed call runs the float fallback
# too. A fine-tuned MiniLM's INT8 measured 0.45x float ONNX's speed at batch 1 that way, 11.9 ms a call where
# a sure row takes about 3 ms and a re-run one 14.5 ms, though 3.5% of its rows fall back
# (benchmarks/fit_scale.py, 30,000 tweets, 6 Dec 2026; docs/export.md).
LATENCY_ROWS = 10


def _timing_inputs(rows: Any, preprocess: Any, schema: Any, ordered: OrderedRows
                   ) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """Rows of varied sizes (more than :data:`CHUNK` of them, or they would not be ordered) timed as a server
    pads them: at batch 1 the :data:`LATENCY_ROWS` held-out rows around the median size, each alone, in turn;
    at batch 64 the first 64 held-out rows padded together (not to the longest row of the whole split, which
    made a batch-1 tweet 64 tokens long where the median one has 29)."""
    middle = len(ordered.order) // 2
    around = ordered.order[max(0, middle - LATENCY_ROWS // 2):][:LATENCY_ROWS]

    def model_inputs(batch: list[Any]) -> tuple[Any, ...]:
        return check_inputs(as_input_tuple(preprocess(batch), "inputs"), schema, any_batch=True)

    return [model_inputs([rows[i]]) for i in around], model_inputs(list(rows[:TIMING_BATCH]))


def _in_turn(run: Runner, inputs: Sequence[tuple[Any, ...]]) -> Callable[[], Any]:
    """A call that runs ``run`` on the next of ``inputs`` each time, starting again after the last."""
    position = itertools.cycle(inputs)
    return lambda: run(next(position))


def _measure(runners: dict[str, Runner], kinds: dict[str, str], inputs: tuple[Any, ...], targets: Any,
             atol: float, rtol: float, tolerance: float, rounds: int, static_batch: int | None,
             ordered: OrderedRows | None = None,
             timing: tuple[list[tuple[Any, ...]], tuple[Any, ...]] | None = None,
             given: list[Any] | None = None) -> dict[str, Any]:
    reference_name = next(n for n, k in kinds.items() if k == "reference")

    def outputs_of(run: Runner) -> list[Any]:
        if ordered is not None:
            return run_ordered(run, ordered, lambda each, chunk: run_in_chunks(each, chunk, static_batch))
        return run_in_chunks(run, inputs, static_batch)

    def parity_stage(name: str) -> None:
        progress.stage("parity on the held-out inputs", variant=name, batch=static_batch or CHUNK,
                       total=int(inputs[0].shape[0]))

    parity_stage(reference_name)
    if given is not None:
        reference = _checked_reference(runners[reference_name], given, inputs, ordered, atol, rtol)
    else:
        try:
            reference = outputs_of(runners[reference_name])
        except ValueError:  # outputs shaped by the padding (per token): one padded batch, as before
            if ordered is None:
                raise
            ordered = None
            reference = outputs_of(runners[reference_name])
    if ordered is not None and targets is not None:
        import torch

        targets = targets[torch.as_tensor(ordered.order)]  # in the order the chunks hold the rows
    rows: dict[str, dict[str, Any]] = {}
    working: dict[str, Runner] = {}
    for name, run in runners.items():
        row: dict[str, Any] = {"kind": kinds[name]}
        if name != reference_name:  # the reference's outputs are in hand already
            parity_stage(name)
        try:
            outputs = reference if name == reference_name else outputs_of(run)
        except Exception as error:
            row.update(ok=False, problem=f"failed on the held-out inputs: {first_line(error)}")
            rows[name] = row
            continue
        working[name] = run
        found = compare(reference, outputs, atol, rtol)
        row.update(max_abs=found["max_abs"], max_rel=found["max_rel"], top1_agreement=found["top1_agreement"])
        if targets is not None and outputs[0].ndim == 2:
            row["accuracy"] = float((outputs[0].argmax(dim=1) == targets).double().mean())
        if kinds[name] in ("exact", "reference", "compiled"):
            row.update(ok=found["ok"], problem=found.get("problem"))
        else:
            row.update(within_tolerance(row, rows[reference_name], found, tolerance))
        if name == reference_name and (broken := non_finite_rows(reference)):
            # every variant agrees with NaN exactly: parity alone called a diverged model verified
            row.update(ok=False, non_finite_rows=broken,
                       problem=f"the model's own outputs are not finite on {broken} of {int(inputs[0].shape[0])} "
                               "held-out rows: the model is broken (did its training diverge? a lower learning "
                               "rate, or clipping), and no variant of it is worth serving")
        rows[name] = row
    small, large = (static_batch, static_batch) if static_batch else (1, TIMING_BATCH)
    ones, many = timing if timing is not None else ([first_rows(inputs, small)], first_rows(inputs, large))
    progress.stage(f"timing {', '.join(working)} (interleaved blocks of 10 calls)", batch=small, total=rounds,
                   unit="rounds")
    latency_rounds = interleaved_samples({n: _in_turn(r, ones) for n, r in working.items()}, rounds, repeat=10)
    latency = {name: statistics.median(values) for name, values in latency_rounds.items()}
    progress.stage(f"timing {', '.join(working)} (interleaved blocks of up to 2 calls)", batch=large,
                   total=rounds, unit="rounds")
    batch_rounds = interleaved_samples({n: functools.partial(r, many) for n, r in working.items()}, rounds, repeat=2,
                                       block_s=BLOCK_S)
    batch = {name: statistics.median(values) for name, values in batch_rounds.items()}
    for name in working:
        rows[name].update(latency_b1_ms=latency[name] * 1e3, latency_ratio=latency[name] / latency[reference_name],
                          throughput_b64_per_s=large / batch[name],
                          throughput_ratio=batch[reference_name] / batch[name],
                          throughput_spread=spread(batch_rounds[name]) / batch[name])
    padding = (f"each chunk of {static_batch or CHUNK} rows preprocessed on its own, shortest rows first"
               if ordered is not None else "one batch")
    return {"variants": rows, "timing_batches": {"latency": small, "throughput": large}, "parity_padding": padding,
            "timing_rounds": batch_rounds, "latency_rounds": latency_rounds, "timing_rule": f"{rounds} interleaved rounds of blocks (10 calls at "
            f"batch {small}, 2 at batch {large}, or 1 where a call takes {BLOCK_S} s), each block {SETTLE_S} s "
            "after the previous one",
            "timing_inputs": (f"{len(ones)} held-out rows of about median size, each alone in turn, and the first "
                              "rows padded together"
                              if timing is not None else "the held-out rows as given")}


REFERENCE_CHECK_ROWS = 32  # rows on which given reference outputs are checked against the reference itself


def _given_outputs(outputs: Any, inputs: tuple[Any, ...]) -> list[Any]:
    """``reference_outputs`` as a list of CPU tensors, one row per held-out input (ConfigError otherwise)."""
    import torch

    parts = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    rows = int(inputs[0].shape[0])
    if not parts or not all(isinstance(p, torch.Tensor) and p.ndim >= 1 and p.shape[0] == rows for p in parts):
        shapes = [tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__ for p in parts]
        raise ConfigError(f"reference_outputs: {shapes}; give the reference's outputs on the {rows} held-out "
                          "rows (a tensor or a tuple of tensors with one row per input, in the inputs' order).")
    return [p.detach().cpu() for p in parts]


def _checked_reference(run: Runner, given: list[Any], inputs: tuple[Any, ...], ordered: OrderedRows | None,
                       atol: float, rtol: float) -> list[Any]:
    """The given reference outputs in the order the parity chunks hold the rows, after the reference itself
    agreed with them on the first rows (a wrong order or another model's outputs are refused, not trusted)."""
    import torch

    if ordered is not None:
        index = torch.as_tensor(ordered.order)
        given = [p[index] for p in given]
        first = tuple(t[:REFERENCE_CHECK_ROWS] for t in ordered.chunks[0])
    else:
        first = tuple(t[:REFERENCE_CHECK_ROWS] for t in inputs)
    count = int(first[0].shape[0])
    found = compare(list(run(first)), [p[:count] for p in given], atol, rtol)
    if not found["ok"]:
        raise ConfigError(f"reference_outputs differ from the reference model's own outputs on the first {count} "
                          f"rows ({found.get('problem') or 'max abs difference ' + str(found['max_abs'])}): give "
                          "its outputs on these very inputs, in their order, or leave reference_outputs out.")
    progress.rows(int(given[0].shape[0]))
    return given


def format_report(report: dict[str, Any]) -> str:
    """The verification report as a text table."""
    header = ("variant", "kind", "max abs", "max rel", "top-1 agree", "accuracy", "latency b1",
              "throughput b64", "size", "ok")
    lines = []
    for name, row in report["variants"].items():
        mark = " *" if name == report.get("deploy") else ""

        def number(key: str, fmt: str, row: dict[str, Any] = row) -> str:
            return "-" if row.get(key) is None else format(row[key], fmt)

        lines.append((name + mark, row["kind"], number("max_abs", ".2e"), number("max_rel", ".2e"),
                      number("top1_agreement", ".2%"), number("accuracy", ".4f"),
                      "-" if row.get("latency_ratio") is None else
                      f"{row['latency_b1_ms']:.3f} ms ({row['latency_ratio']:.2f}x)",
                      "-" if row.get("throughput_ratio") is None else
                      f"{row['throughput_b64_per_s']:,.0f}/s ({row['throughput_ratio']:.2f}x)"
                      + (f" ±{row['throughput_spread']:.0%}" if row.get("throughput_spread") is not None else ""),
                      "-" if row.get("bytes") is None else f"{row['bytes'] / 1024:,.1f} KiB",
                      "yes" if row["ok"] else "NO"))
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
    text = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *lines]]
    text.insert(1, "  ".join("-" * w for w in widths))
    inputs = report["inputs"]
    out = [f"artifact {report['artifact']}: {'OK' if report['ok'] else 'PARITY FAILED'}",
           f"reference: {report['reference']}"
           + (" (ratios are to it; pass model= from Python for ratios to the nn.Module)"
              if report["reference"].startswith("the artifact's pt2") else ""),
           f"inputs: {inputs['count']} from {inputs['source']}"
           f"{' (through the bundled preprocessing)' if inputs['preprocessed'] else ''}; threads {report['threads']}",
           "", *text, "",
           f"latency: batch {report['timing_batches']['latency']}, model only (ratio to the reference, lower is "
           f"faster); throughput: batch {report['timing_batches']['throughput']} (ratio, higher is faster; ± the "
           "interquartile range of the rounds, as a share of the median)"
           + (f"; {report['timing_rule']}" if report.get("timing_rule") else "")
           + (f"; timed on {inputs['timing_inputs']}" if inputs.get("timing_inputs") else "")]
    if report.get("deploy"):
        out.append(f"* deploy: {report['deploy']} ({report['deploy_rule']})")
    for name, row in report["variants"].items():
        if row.get("choice"):
            out.append(f"{name}: {row['choice']}")
    for name, row in report["variants"].items():
        if row.get("problem") and not row.get("choice"):
            out.append(f"{name}: {row['problem']}")
    compiled = report["variants"].get("compiled")
    if compiled and compiled.get("compile_seconds") is not None:
        out.append(f"compiled: the reference under torch.compile (not a file of the artifact; torchwork serve "
                   f"--compile serves it); compiling took {compiled['compile_seconds']:.1f} s")
    cpp = report["variants"].get("cpp")
    if cpp and cpp.get("runs"):
        out.append(f"cpp: the C++ runner (torchwork-run, no Python) on the {cpp['runs']} variant; its build "
                   + ("reused" if cpp["build_cached"] else f"took {cpp['build_seconds']:.0f} s"))
    for name, reason in (report.get("not_loaded") or {}).items():
        out.append(f"not loaded: {name}: {reason}")
    for name, reason in (report.get("refused_at_export") or {}).items():
        out.append(f"refused at export: {name}: {reason}")
    for advice in report.get("advice") or []:
        out.append(f"advice: {advice}")
    return "\n".join(out)
