"""Parity checks: run eager and an exported variant on the same probe inputs and compare.

Probes cover several batch sizes (1 and many) and, for text, several sequence lengths, because the silent
export failures are all shape-dependent: ``torch.jit.trace`` freezes loops over the batch and per-row
Python branches at the example's values, and the ONNX exporter may keep a requested dynamic dim static or
keep only the branch the example took.

Example:
    >>> import torch
    >>> from torchwork.deploy.parity import compare
    >>> compare([torch.ones(2, 3)], [torch.ones(2, 3) + 1e-6])["ok"]
    True
    >>> check_tolerances(atol=float("nan"), rtol=1e-3)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: atol=nan: a parity tolerance is a finite number >= 0 (default 0.0001); ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_finite_number
from torchwork.quoting import quote_value

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3


MAX_ROUNDS = 100_000


def check_tolerances(atol: Any, rtol: Any, tolerance: Any = 0.01, rounds: Any = 1,
                     rounds_name: str = "rounds") -> None:
    """Refuse, before any work, a parity tolerance that is not a finite number >= 0 (NaN compares false, so
    a NaN ``atol`` failed every variant; an infinite one passed any output, NaN outputs included), an
    accuracy ``tolerance`` outside [0, 1], and timing ``rounds`` that are not a count from 1 (0 rounds
    reported no timing at all, and said nothing)."""
    defaults = {"atol": DEFAULT_ATOL, "rtol": DEFAULT_RTOL}
    for name, value in (("atol", atol), ("rtol", rtol)):
        if not is_finite_number(value) or value < 0:
            raise ConfigError(f"{name}={quote_value(value)}: a parity tolerance is a finite number >= 0 (default "
                              f"{defaults[name]}); |out - eager| <= atol + rtol * |eager| is checked.")
    if not is_finite_number(tolerance) or not -1 <= tolerance <= 1:
        raise ConfigError(f"tolerance={quote_value(tolerance)}: the accuracy a quantized variant may lose is a fraction "
                          "from 0 to 1 (default 0.01; a negative one asks it to gain that much).")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise ConfigError(f"{rounds_name}={quote_value(rounds)}: the timing rounds are a count from 1 to {MAX_ROUNDS:,} "
                          "(default 20).")


@dataclass
class Probe:
    label: str
    inputs: tuple[Any, ...]


def first_line(error: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message`` (the last line for TorchScript's interpreter tracebacks)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if line.startswith("The following operation failed in the TorchScript interpreter") and len(lines) > 1:
        line = lines[-1]
    text = f"{type(error).__name__}: {line}".rstrip(". ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def length_like(tensor: Any, length: int) -> bool:
    """A 1-D integer tensor whose values fit in [0, length]: the per-row lengths of a padded batch."""
    import torch

    return (tensor.ndim == 1 and not tensor.dtype.is_floating_point and tensor.dtype != torch.bool
            and tensor.numel() > 0 and int(tensor.min()) >= 0 and int(tensor.max()) <= length)


def make_probes(pool: tuple[Any, ...], dynamic: Sequence[dict[int, str]], batch_sizes: Sequence[int],
                lengths: Sequence[int] = (), seed: int = 0) -> list[Probe]:
    """Probe inputs built from the rows of ``pool`` (real model inputs when the caller has them).

    Rows are resampled (seeded), so every batch size sees rows in a new order; float rows get a little
    noise when the pool has fewer than 8 rows, so that per-row branches see new values. Along a dynamic
    length dim (dim 1 of token ids), ids are cut or zero-padded and 1-D length inputs are clamped to fit.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    rows = pool[0].shape[0]
    batch_dynamic = any(d.get(0) == "batch" for d in dynamic)
    length_dims = [i for i, d in enumerate(dynamic) if d.get(1) == "length"]
    base_length = pool[length_dims[0]].shape[1] if length_dims else None

    def batch_of(size: int) -> tuple[Any, ...]:
        index = torch.randint(0, rows, (size,), generator=generator)
        picked = []
        for tensor in pool:
            t = tensor[index] if tensor.ndim else tensor
            if rows < 8 and t.dtype.is_floating_point:
                t = t + 0.1 * (tensor.float().std() if tensor.numel() > 1 else 1.0) * torch.randn(
                    t.shape, generator=generator).to(t.dtype)
            picked.append(t)
        return tuple(picked)

    def with_length(inputs: tuple[Any, ...], length: int) -> tuple[Any, ...]:
        resized = []
        for index, tensor in enumerate(inputs):
            if index in length_dims:
                if length <= tensor.shape[1]:
                    tensor = tensor[:, :length]
                else:
                    pad = tensor.new_zeros((tensor.shape[0], length - tensor.shape[1], *tensor.shape[2:]))
                    tensor = torch.cat([tensor, pad], dim=1)
            elif length_dims and length_like(tensor, base_length):
                low = 1 if int(tensor.min()) >= 1 else 0
                tensor = tensor.clamp(low, length)
            resized.append(tensor)
        return tuple(resized)

    probes = []
    sizes = sorted(set(batch_sizes))  # the caller passes the example's batch size when batch is static
    for size in sizes:
        probes.append(Probe(f"batch {size}", batch_of(size)))
    if base_length is not None:
        for length in sorted(set(lengths)):
            if length != base_length:
                for size in ((min(sizes), max(sizes)) if batch_dynamic else (rows,)):
                    probes.append(Probe(f"batch {size}, length {length}", with_length(batch_of(size), length)))
    return probes


def compare(reference: Sequence[Any], outputs: Sequence[Any], atol: float = DEFAULT_ATOL,
            rtol: float = DEFAULT_RTOL) -> dict[str, Any]:
    """Shapes, max abs diff, max rel diff (max abs diff / largest |reference|), top-1 agreement.

    ``ok``: same count and shapes, and ``|out - ref| <= atol + rtol * |ref|`` everywhere.
    """
    result: dict[str, Any] = {"ok": False, "max_abs": None, "max_rel": None, "top1_agreement": None}
    if len(reference) != len(outputs):
        result["problem"] = f"{len(outputs)} outputs, eager returns {len(reference)}"
        return result
    shapes = [(list(r.shape), list(o.shape)) for r, o in zip(reference, outputs)]
    for index, (want, got) in enumerate(shapes):
        if want != got:
            result["problem"] = f"output {index} has shape {got}, eager {want}"
            return result
    max_abs, max_rel, close = 0.0, 0.0, True
    for r, o in zip(reference, outputs):
        r64, o64 = r.double(), o.double()
        if r64.numel() == 0:
            continue
        diff = (o64 - r64).abs()
        nan_mismatch = bool((r64.isnan() != o64.isnan()).any())
        diff = diff.nan_to_num(nan=float("inf") if nan_mismatch else 0.0)
        max_abs = max(max_abs, float(diff.max()))
        scale = float(r64.abs().nan_to_num(nan=0.0).max())
        max_rel = max(max_rel, float(diff.max()) / scale if scale > 0 else float(diff.max()))
        close = close and not nan_mismatch and bool((diff <= atol + rtol * r64.abs().nan_to_num(nan=0.0)).all())
    result.update(ok=close, max_abs=max_abs, max_rel=max_rel)
    first_ref, first_out = reference[0], outputs[0]
    if first_ref.ndim == 2 and first_ref.shape[1] > 1 and first_ref.shape[0] > 0:
        agree = (first_ref.argmax(dim=1) == first_out.argmax(dim=1)).double().mean()
        result["top1_agreement"] = float(agree)
    if not close:
        result["problem"] = f"outputs differ from eager: max abs diff {max_abs:.3g} (tolerance {atol:g} + {rtol:g}*|eager|)"
    return result


def check_variant(run: Callable[[Sequence[Any]], list[Any]], probes: Sequence[Probe],
                  eager_outputs: Sequence[list[Any] | BaseException], *, exact: bool = True,
                  atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL) -> dict[str, Any]:
    """Run a variant on every probe and compare with eager's outputs for the same probe.

    ``exact=False`` (quantized variants): only the accepted shapes and finite outputs are required here;
    their accuracy is judged by ``verify`` on real held-out data.
    """
    results: list[dict[str, Any]] = []
    failures: dict[str, list[str]] = {}  # problem -> probe labels, so that one cause is reported once
    for probe, expected in zip(probes, eager_outputs):
        entry: dict[str, Any] = {"probe": probe.label, "shapes": [list(t.shape) for t in probe.inputs]}
        if isinstance(expected, BaseException):
            entry.update(skipped=f"eager itself rejects these inputs ({first_line(expected)})")
            results.append(entry)
            continue
        try:
            outputs = run(probe.inputs)
        except Exception as error:
            problem = f"rejected the inputs eager accepts ({first_line(error)})"
            if "Guard failed" in problem:
                problem += "; torch.export derived this guard from the model's code, so the program accepts " \
                           "fewer shapes than eager"
            entry.update(ok=False, problem=problem)
            failures.setdefault(entry["problem"], []).append(probe.label)
            results.append(entry)
            continue
        found = compare(expected, outputs, atol, rtol)
        if not exact and str(found.get("problem", "")).startswith("outputs differ"):
            finite = all(bool(o.isfinite().all()) for o in outputs if o.dtype.is_floating_point)
            found["ok"] = finite
            found["problem"] = None if finite else "non-finite outputs"
        entry.update({k: v for k, v in found.items() if v is not None})
        if not found["ok"]:
            failures.setdefault(str(found["problem"]), []).append(probe.label)
        results.append(entry)
    problems = [f"{' / '.join(labels)}: {problem}." for problem, labels in failures.items()]
    checked = [r for r in results if "skipped" not in r]
    if not checked:
        problems.append("eager rejected every probe, so nothing could be compared.")
    return {"ok": not problems, "probes": results, "problems": problems}


def non_finite_rows(outputs: Sequence[Any]) -> int:
    """How many rows of the outputs (tensors, rows first) hold a NaN or nothing finite at all; an infinity
    beside finite values is left alone (a masked logit of -inf is an answer, not a broken model)."""
    import torch

    bad = None
    for output in outputs:
        if isinstance(output, torch.Tensor) and output.is_floating_point() and output.ndim >= 1:
            flat = output.reshape(output.shape[0], -1)
            rows = torch.isnan(flat).any(dim=1) | ~torch.isfinite(flat).any(dim=1)
            bad = rows if bad is None else bad | rows
    return 0 if bad is None else int(bad.sum())


def within_tolerance(row: dict[str, Any], reference: dict[str, Any], found: dict[str, Any],
                      tolerance: float) -> dict[str, Any]:
    """Quantized variants: judged on accuracy (or top-1 agreement), not on elementwise closeness."""
    if found.get("problem") and not str(found["problem"]).startswith("outputs differ"):
        return {"ok": False, "problem": found.get("problem"), "within_tolerance": False}
    if "accuracy" in row and "accuracy" in reference:
        drop = reference["accuracy"] - row["accuracy"]
        ok = drop <= tolerance + 1e-9  # 0.59 - 0.58 is 0.010000000000000009: one row in 100 is within 0.01
        problem = None if ok else f"accuracy {row['accuracy']:.4f} vs {reference['accuracy']:.4f} (drop {drop:.4f} > " \
                                  f"tolerance {tolerance:g})"
    elif found.get("top1_agreement") is not None:
        ok = found["top1_agreement"] >= 1 - tolerance - 1e-9
        problem = None if ok else f"top-1 agreement {found['top1_agreement']:.4f} < {1 - tolerance:g}"
    else:
        ok = found["max_rel"] is not None and found["max_rel"] <= tolerance
        problem = None if ok else f"max relative diff {found['max_rel']:.3g} > tolerance {tolerance:g}"
    return {"ok": ok, "problem": problem, "within_tolerance": ok}
