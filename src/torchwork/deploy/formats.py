"""One function per format: write the model file(s) and say what the exporter really kept.

Each exporter runs quietly (its prints, warnings and log lines go into a list kept for the report) and
raises :class:`~torchwork.errors.ExportError` with the cause and a fix when the exporter itself fails.
Whether the written file reproduces eager is decided afterwards by :mod:`torchwork.deploy.parity`.

Example:
    >>> from torchwork.deploy.formats import explain_failure
    >>> "torch.where" in explain_failure("GuardOnDataDependentSymNode: Could not guard on data-dependent")
    True
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import io
import logging
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchwork.deploy.parity import first_line
from torchwork.errors import ExportError

_NOISY_LOGGERS = ("", "torch", "torch.onnx", "torch.export", "torch._dynamo", "torch.fx", "onnxscript", "onnx_ir")


@contextlib.contextmanager
def quiet(log: list[str]) -> Iterator[None]:
    """Capture prints, warnings and torch / onnxscript log records into ``log``."""
    out, err = io.StringIO(), io.StringIO()
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            try:
                yield
            finally:
                seen = set()
                for warning in caught:
                    text = f"{warning.category.__name__}: {str(warning.message).splitlines()[0]}"
                    if text not in seen:
                        seen.add(text)
                        log.append(text)
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        log.extend(line for line in (out.getvalue() + err.getvalue()).splitlines() if line.strip())


def input_names_of(model: Any, count: int) -> list[str]:
    """Names of forward()'s first ``count`` positional parameters (``input_i`` when unnamed)."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input_{i}" for i in range(len(names), count)]


Bounds = Mapping[str, tuple[int, int]]  # dim name -> (min, max): a dim dynamic only up to a bound


def torch_dims(dynamic: Sequence[dict[int, str]], bounds: Bounds | None = None) -> tuple[Any, ...]:
    """``dynamic_shapes`` for torch.export: one named ``Dim`` per dynamic dim name, shared across inputs,
    with its ``(min, max)`` from ``bounds`` when it has one (else from 1, unbounded)."""
    import torch

    bounds = bounds or {}
    dims: dict[str, Any] = {}
    spec = []
    for entry in dynamic:
        if not entry:
            spec.append(None)
            continue
        for name in entry.values():
            if name not in dims:
                low, high = bounds.get(name, (1, None))
                dims[name] = torch.export.Dim(name, min=low, max=high) if high else torch.export.Dim(name, min=low)
        spec.append({axis: dims[name] for axis, name in entry.items()})
    return tuple(spec)


def deepest_cause(error: BaseException) -> BaseException:
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def explain_failure(text: str, fmt: str = "") -> str:
    """A fix for the usual reasons torch.export / the ONNX exporter / TorchScript give up."""
    if fmt.startswith("TorchScript"):
        return ("TorchScript cannot capture this model (torch.cond, torch.compile'd code, or Python it does not "
                "support). It is the deprecated legacy format: use 'pt2' or 'onnx'.")
    if "data-dependent" in text or "GuardOnDataDependent" in text:
        return ("the model branches in Python on tensor values (if x.sum() > 0, .item(), .tolist(), a loop over "
                "rows). Compute on the whole batch instead (torch.where, masks) or use torch.cond.")
    if "Constraints violated" in text or "specialized it to be a constant" in text:
        return ("the model's code fixes or narrows a dimension requested dynamic (int(x.shape[0]), "
                "x.view(4, ...), if x.shape[0] > 2). Use x.shape[0] symbolically, reshape(-1, ...), and no "
                "Python branches on sizes.")
    if "Unsupported" in text or "not supported" in text or "No decompositions" in text:
        return "an operator has no export rule; replace it with standard torch operators."
    return "see the exporter's message; torch.export must succeed for both pt2 and ONNX."


def export_failure(fmt: str, error: BaseException, log: Sequence[str]) -> ExportError:
    cause = deepest_cause(error)
    message = str(cause)
    suggested = [line.strip() for line in message.splitlines() if "Dim(" in line or line.strip().startswith(
        ("batch", "length"))]
    bound = re.search(r"Dim\(['\"]length['\"][^)]*max=(\d+)", message)  # torch's suggested fix, e.g. max=64
    why = length_bound_advice(int(bound.group(1))) if bound else explain_failure(message, fmt)
    text = f"{fmt} export failed ({first_line(cause, 400)}). Why: {why}"
    if suggested:
        text += " torch suggests: " + "; ".join(suggested[:3]) + "."
    failure = ExportError(text)
    failure.log = list(log)[-20:]  # type: ignore[attr-defined]
    return failure


def kept_dims(program: Any, names: Sequence[str], dynamic: Sequence[dict[int, str]]) -> list[dict[str, Any]]:
    """For each requested dynamic dim: was it kept dynamic by torch.export, and over which range?"""
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user = set(program.graph_signature.user_inputs)
    nodes = [n for n in placeholders if n.name in user]
    kept = []
    for name, node, entry in zip(names, nodes, dynamic):
        value = node.meta.get("val")
        for axis, dim_name in entry.items():
            size = value.shape[axis] if value is not None else None
            record: dict[str, Any] = {"input": name, "dim": axis, "requested": dim_name}
            if isinstance(size, int):
                record.update(dynamic=False, static=size)
            elif size is not None:
                constraint = program.range_constraints.get(size.node.expr)
                low = _finite(constraint.lower) if constraint is not None else None
                high = _finite(constraint.upper) if constraint is not None else None
                record.update(dynamic=True, min=low, max=high)
            kept.append(record)
    return kept


def _finite(bound: Any) -> int | None:
    """A sympy range bound as an int; None for torch's int_oo (infinity)."""
    return int(bound) if getattr(bound, "is_Integer", False) else None


def length_bound_advice(high: int) -> str:
    """What to do when the model accepts a length only up to ``high`` (nanoGPT's block_size assert)."""
    return (f"the model takes at most {high} along the length (an assert, or a table of {high} positions): "
            f"export it with max_length={high} (--max-length {high}), the length then dynamic from 1 to {high} "
            "and longer inputs refused.")


def dims_problems(kept: Sequence[dict[str, Any]], exporter: str, bounds: Bounds | None = None) -> list[str]:
    """The requested dynamic dims the exporter made static or narrowed (beyond their requested ``bounds``)."""
    problems = []
    for record in kept:
        where = f"dim {record['dim']} ({record['requested']}) of input {record['input']!r}"
        low, high = (bounds or {}).get(record["requested"], (1, None))
        if not record.get("dynamic"):
            problems.append(f"{exporter} made {where} static ({record.get('static')}) although it was requested "
                            "dynamic: the model turns that size into a Python int (int(x.shape[0]), "
                            "x.view(N, ...), .tolist()). Keep sizes symbolic (reshape(-1, ...)).")
        elif (record.get("min") or 1) > max(low, 1) or record.get("max") != high:
            kept_high = record.get("max") if record.get("max") is not None else "inf"
            problem = f"{exporter} narrowed {where} to [{record.get('min')}, {kept_high}]"
            if record["requested"] == "length" and record.get("max") is not None and (
                    high is None or record["max"] < high):
                problems.append(f"{problem}: {length_bound_advice(record['max'])}")
                continue
            problems.append(f"{problem}: the model branches on that size (e.g. if x.shape[0] > 2) and the graph "
                            "keeps only the branch the example took. Remove the branch or make both sides one "
                            "tensor expression.")
    return problems


# ----------------------------------------------------------------------------------------- formats
def export_pt2(model: Any, args: tuple[Any, ...], path: Path, names: Sequence[str],
               dynamic: Sequence[dict[int, str]], bounds: Bounds | None = None) -> dict[str, Any]:
    import torch

    log: list[str] = []
    try:
        with quiet(log):
            program = torch.export.export(model, args, dynamic_shapes=torch_dims(dynamic, bounds))
            torch.export.save(program, str(path))
    except Exception as error:
        raise export_failure("pt2 (torch.export)", error, log) from error
    kept = kept_dims(program, names, dynamic)
    return {"files": [path.name], "dims": kept, "problems": dims_problems(kept, "torch.export", bounds),
            "log": log[-20:]}


def export_onnx(model: Any, args: tuple[Any, ...], path: Path, names: Sequence[str],
                output_names: Sequence[str], dynamic: Sequence[dict[int, str]],
                bounds: Bounds | None = None) -> dict[str, Any]:
    import torch

    log: list[str] = []
    try:
        with quiet(log):
            program = torch.onnx.export(model, args, dynamo=True, input_names=list(names),
                                        output_names=list(output_names), dynamic_shapes=torch_dims(dynamic, bounds),
                                        verbose=False, optimize=True)
            program.save(str(path), external_data=True)
    except Exception as error:
        raise export_failure("ONNX (torch.onnx.export, dynamo=True)", error, log) from error
    files = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
    problems: list[str] = []
    kept: list[dict[str, Any]] = []
    if getattr(program, "exported_program", None) is not None:
        kept = kept_dims(program.exported_program, names, dynamic)
        problems += dims_problems(kept, "the ONNX exporter (torch.export inside it)", bounds)
    graph = onnx_summary(program.model_proto if hasattr(program, "model_proto") else path)
    explained = {(k["input"], k["dim"]) for k in kept if not k.get("dynamic")}
    for name, entry in zip(names, dynamic):
        declared = graph["inputs"].get(name, [])
        for axis, dim_name in entry.items():
            if axis < len(declared) and isinstance(declared[axis], int) and (name, axis) not in explained:
                problems.append(f"the ONNX graph declares dim {axis} ({dim_name}) of input {name!r} as the fixed "
                                f"size {declared[axis]}, although it was requested dynamic.")
    exporter_steps = [line for line in log if line.startswith("[torch.onnx]")]
    return {"files": files, "dims": kept, "problems": list(dict.fromkeys(problems)), "graph": graph,
            "exporter_steps": exporter_steps[-8:], "log": log[-20:]}


def onnx_summary(model: Any) -> dict[str, Any]:
    """Opset, declared input / output shapes (ints are static dims) and operator counts of a graph."""
    import onnx

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)

    def dims(value: Any) -> list[Any]:
        return [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?")
                for d in value.type.tensor_type.shape.dim]

    ops = collections.Counter(node.op_type for node in proto.graph.node)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": opset, "inputs": {i.name: dims(i) for i in proto.graph.input},
            "outputs": {o.name: dims(o) for o in proto.graph.output}, "ops": dict(sorted(ops.items()))}


TORCHSCRIPT_DEPRECATED = (
    "TorchScript is deprecated in PyTorch (documented since 2.9, runtime warnings since 2.10 that Python's "
    "default warning filters hide). It is exported as a legacy option only; prefer 'pt2' (torch.export) or "
    "'onnx'.")


def export_torchscript(model: Any, args: tuple[Any, ...], path: Path, method: str = "trace") -> dict[str, Any]:
    import torch

    log: list[str] = []
    try:
        with quiet(log):
            if method == "script":
                module = torch.jit.script(model)
            else:
                # check_trace re-runs the same inputs, so it cannot see what the example did not exercise.
                module = torch.jit.trace(model, args, check_trace=False)
            torch.jit.save(module, str(path))
    except Exception as error:
        raise export_failure(f"TorchScript ({method})", error, log) from error
    tracer = [line for line in log if line.startswith("TracerWarning")]
    return {"files": [path.name], "method": method, "tracer_warnings": tracer[:5], "problems": [],
            "log": log[-20:]}


TRACE_EXPLANATION = (
    "torch.jit.trace records one run with the example inputs: Python loops over the batch or over rows, "
    "and if/else on tensor values or sizes, are frozen at what the example did (without an error, and for "
    "size-only loops without a warning). Use 'pt2', which refuses such code with an error naming the line, or "
    "torchscript_method='script'.")
