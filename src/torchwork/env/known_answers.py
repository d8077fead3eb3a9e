"""Known-answer tests: the operations a model relies on, against float64 values computed without torch.

Each :class:`Case` makes its inputs with NumPy (seeded), runs the torch operation on a device, and
computes the expected result independently in float64 (NumPy and the textbook formula: an explicit
convolution sum, ``exp(x - max) / sum``, the normalisation formula, the hand-derived gradient). A result
passes when ``|actual - expected| <= atol + rtol * |expected|`` everywhere; the tolerances are stated per
case (float32 has 24 significant bits; bfloat16 8 and float16 11, so autocast cases are looser).

With a GPU, every case also runs there, and CPU and GPU results are compared with each other
(TF32 switched off so that float32 means float32).

Example:
    >>> from torchwork.env.known_answers import run_checks
    >>> results = run_checks(devices=["cpu"], names=["softmax"])
    >>> [(r.name, r.ok) for r in results]
    [('softmax [cpu]', True)]
"""

from __future__ import annotations

import dataclasses
import functools
import io
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from torchwork.arguments import name_list
from torchwork.errors import ConfigError

Arrays = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Case:
    """One known-answer test: inputs, the torch operation on a device, the float64 reference."""

    name: str
    make_inputs: Callable[[np.random.Generator], Arrays]
    run: Callable[[Arrays, str], np.ndarray]
    reference: Callable[[Arrays], np.ndarray]
    atol: float
    rtol: float
    supported: Callable[[str], str | None] = lambda device: None  # a reason to skip, or None
    cross_device: bool = True  # compare this op's CPU and GPU results with each other


@dataclasses.dataclass
class CheckResult:
    """The outcome of one case on one device (or of one device against the CPU)."""

    name: str
    ok: bool
    max_error: float | None
    atol: float | None
    rtol: float | None
    detail: str = ""
    skipped: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _tensor(array: np.ndarray, device: str, requires_grad: bool = False) -> Any:
    import torch

    return torch.tensor(array, dtype=torch.float32, device=device, requires_grad=requires_grad)


def _out(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().double().numpy()


# ----------------------------------------------------------------------------------------- the operations
def _matmul_inputs(rng: np.random.Generator) -> Arrays:
    return {"a": rng.standard_normal((64, 128)), "b": rng.standard_normal((128, 48))}


def _matmul(x: Arrays, device: str) -> np.ndarray:
    import torch

    return _out(torch.matmul(_tensor(x["a"], device), _tensor(x["b"], device)))


def _matmul_reference(x: Arrays) -> np.ndarray:
    return x["a"].astype(np.float32).astype(np.float64) @ x["b"].astype(np.float32).astype(np.float64)


def _conv_inputs(rng: np.random.Generator) -> Arrays:
    return {"x": rng.standard_normal((2, 3, 12, 12)), "w": rng.standard_normal((5, 3, 3, 3)) * 0.3,
            "b": rng.standard_normal(5)}


def _conv2d(x: Arrays, device: str) -> np.ndarray:
    import torch

    return _out(torch.nn.functional.conv2d(_tensor(x["x"], device), _tensor(x["w"], device),
                                           _tensor(x["b"], device), stride=1, padding=1))


def _conv2d_reference(x: Arrays) -> np.ndarray:
    """out[n, o, i, j] = b[o] + sum over c, di, dj of w[o, c, di, dj] * padded[n, c, i + di, j + dj]."""
    inp, w, b = (x[k].astype(np.float32).astype(np.float64) for k in ("x", "w", "b"))
    padded = np.pad(inp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, width = inp.shape
    out = np.zeros((n, w.shape[0], h, width)) + b[None, :, None, None]
    for di in range(w.shape[2]):
        for dj in range(w.shape[3]):
            window = padded[:, :, di:di + h, dj:dj + width]  # (n, c, h, w)
            out += np.einsum("nchw,oc->nohw", window, w[:, :, di, dj])
    return out


def _softmax_inputs(rng: np.random.Generator) -> Arrays:
    return {"x": rng.standard_normal((16, 40)) * 6.0}


def _softmax(x: Arrays, device: str) -> np.ndarray:
    import torch

    return _out(torch.softmax(_tensor(x["x"], device), dim=-1))


def _softmax_reference(x: Arrays) -> np.ndarray:
    v = x["x"].astype(np.float32).astype(np.float64)
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm_inputs(rng: np.random.Generator) -> Arrays:
    return {"x": rng.standard_normal((8, 64)) * 3 + 1, "w": rng.standard_normal(64), "b": rng.standard_normal(64)}


def _layer_norm(x: Arrays, device: str) -> np.ndarray:
    import torch

    return _out(torch.nn.functional.layer_norm(_tensor(x["x"], device), (64,), _tensor(x["w"], device),
                                               _tensor(x["b"], device), eps=1e-5))


def _layer_norm_reference(x: Arrays) -> np.ndarray:
    v, w, b = (x[k].astype(np.float32).astype(np.float64) for k in ("x", "w", "b"))
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as layer norm defines it
    return (v - mean) / np.sqrt(var + 1e-5) * w + b


def _backward_inputs(rng: np.random.Generator) -> Arrays:
    return {"x": rng.standard_normal((32, 16)), "w": rng.standard_normal((16, 8)) * 0.4}


def _backward(x: Arrays, device: str) -> np.ndarray:
    import torch

    weight = _tensor(x["w"], device, requires_grad=True)
    loss = torch.tanh(_tensor(x["x"], device) @ weight).pow(2).sum()
    loss.backward()
    return _out(weight.grad)


def _backward_reference(x: Arrays) -> np.ndarray:
    """d/dW sum(tanh(XW)^2) = X^T (2 tanh(XW) (1 - tanh(XW)^2))."""
    v, w = (x[k].astype(np.float32).astype(np.float64) for k in ("x", "w"))
    t = np.tanh(v @ w)
    return v.T @ (2 * t * (1 - t ** 2))


def _autocast(dtype_name: str) -> Callable[[Arrays, str], np.ndarray]:
    def run(x: Arrays, device: str) -> np.ndarray:
        import torch

        dtype = getattr(torch, dtype_name)
        with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
            out = torch.matmul(_tensor(x["a"], device), _tensor(x["b"], device))
        if out.dtype != dtype:
            raise AssertionError(f"autocast produced {out.dtype}, not {dtype}: autocast is not in effect")
        return _out(out)

    return run


def _autocast_supported(dtype_name: str) -> Callable[[str], str | None]:
    def supported(device: str) -> str | None:
        import torch

        kind = torch.device(device).type
        if kind == "cuda" and dtype_name == "bfloat16" and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16"
        try:
            with torch.autocast(device_type=kind, dtype=getattr(torch, dtype_name)):
                torch.matmul(torch.ones(2, 2, device=device), torch.ones(2, 2, device=device))
        except (RuntimeError, AssertionError) as error:
            return f"autocast({kind}, {dtype_name}) is not supported here: {str(error).splitlines()[0]}"
        return None

    return supported


CASES: tuple[Case, ...] = (
    Case("matmul", _matmul_inputs, _matmul, _matmul_reference, atol=1e-4, rtol=1e-4),
    Case("conv2d", _conv_inputs, _conv2d, _conv2d_reference, atol=1e-4, rtol=1e-4),
    Case("softmax", _softmax_inputs, _softmax, _softmax_reference, atol=1e-6, rtol=1e-5),
    Case("layer_norm", _layer_norm_inputs, _layer_norm, _layer_norm_reference, atol=1e-4, rtol=1e-4),
    Case("autograd backward", _backward_inputs, _backward, _backward_reference, atol=1e-4, rtol=1e-4),
    # bfloat16 keeps 8 significant bits: inputs and output are each rounded to 2**-9 relative; a 128-term
    # dot product of N(0, 1) values has a spread of about 11, so 0.25 absolute covers the rounding of the
    # inputs and 2**-7 relative the output's.
    Case("autocast bfloat16 matmul", _matmul_inputs, _autocast("bfloat16"), _matmul_reference, atol=0.25,
         rtol=2 ** -7, supported=_autocast_supported("bfloat16"), cross_device=False),
    # float16: 11 significant bits, eight times tighter than bfloat16.
    Case("autocast float16 matmul", _matmul_inputs, _autocast("float16"), _matmul_reference, atol=0.04,
         rtol=2 ** -10, supported=_autocast_supported("float16"), cross_device=False),
)


def compare_arrays(actual: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> tuple[bool, float, str]:
    """(within ``atol + rtol * |expected|`` everywhere and finite, the largest error, where it is, in words)."""
    if actual.shape != expected.shape:
        return False, float("inf"), f"shape {actual.shape}, expected {expected.shape}"
    error = np.abs(actual - expected)
    excess = error - (atol + rtol * np.abs(expected))
    worst = int(np.argmax(excess))
    ok = bool(np.all(np.isfinite(actual)) and excess.flat[worst] <= 0)
    where = tuple(int(i) for i in np.unravel_index(worst, expected.shape))
    detail = "" if ok else (f"at index {where}: got {actual.flat[worst]:.6g}, "
                            f"expected {expected.flat[worst]:.6g}")
    return ok, float(np.nanmax(error)) if error.size else 0.0, detail


def _timed(name: str, atol: float | None, rtol: float | None, body: Callable[[], tuple[bool, float, str]]
           ) -> CheckResult:
    started = time.perf_counter()
    try:
        ok, error, detail = body()
    except Exception as failure:  # a crash inside an op is a failed check, reported with its message
        ok, error, detail = False, None, f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    return CheckResult(name, ok, error, atol, rtol, detail, seconds=round(time.perf_counter() - started, 4))


def default_devices() -> list[str]:
    """``["cpu"]``, plus ``"cuda"`` when a GPU is usable."""
    import torch

    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _case_on_devices(case: Case, devices: Sequence[str], seed: int) -> list[CheckResult]:
    inputs = case.make_inputs(np.random.default_rng(seed))
    expected = case.reference(inputs)
    outputs: dict[int, np.ndarray] = {}  # by position in devices

    def against_reference(position: int) -> tuple[bool, float, str]:
        outputs[position] = case.run(inputs, devices[position])
        return compare_arrays(outputs[position], expected, case.atol, case.rtol)

    def against_first(position: int) -> tuple[bool, float, str]:
        return compare_arrays(outputs[position], outputs[0], case.atol, case.rtol)

    results = []
    for position, device in enumerate(devices):
        reason = case.supported(device)
        if reason:
            results.append(CheckResult(f"{case.name} [{device}]", True, None, None, None, reason, skipped=True))
        else:
            results.append(_timed(f"{case.name} [{device}]", case.atol, case.rtol,
                                  functools.partial(against_reference, position)))
    for position, device in enumerate(devices[1:], 1):
        if case.cross_device and 0 in outputs and position in outputs:
            results.append(_timed(f"{case.name} [{device} vs {devices[0]}]", case.atol, case.rtol,
                                  functools.partial(against_first, position)))
    return results


def case_results(cases: Sequence[Case], devices: Sequence[str], seed: int = 0) -> list[CheckResult]:
    """Every case on every device against its float64 reference, then each further device against the
    first one (the CPU): the same inputs, outputs compared within the case's tolerance."""
    import torch

    allow_tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return [result for case in cases for result in _case_on_devices(case, devices, seed)]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = allow_tf32


# ----------------------------------------------------------------------------------------- whole-system checks
class _SquaresDataset:
    """Item i is [i, i*i, the worker's id] in float64: the expected batches follow from the formula."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int) -> Any:
        import torch

        info = torch.utils.data.get_worker_info()
        return torch.tensor([index, index * index, -1 if info is None else info.id], dtype=torch.float64)


def _dataloader() -> tuple[bool, float, str]:
    import torch

    # Any object with __len__ and __getitem__ is a map-style dataset; subclassing torch's Dataset would
    # import torch with this module.
    dataset = cast("torch.utils.data.Dataset[Any]", _SquaresDataset())
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=2, shuffle=False,
                                         multiprocessing_context="spawn" if not hasattr(__import__("os"), "fork")
                                         else None, persistent_workers=False)
    batches = torch.cat(list(loader)).numpy()
    index = np.arange(48, dtype=np.float64)
    values_ok = np.array_equal(batches[:, :2], np.stack([index, index ** 2], axis=1))
    workers = set(batches[:, 2].tolist())
    if not values_ok:
        return False, float(np.max(np.abs(batches[:, 1] - index ** 2))), "batches from the workers differ from the formula"
    if workers != {0.0, 1.0}:
        return False, 0.0, f"items came from workers {sorted(workers)}, expected both workers 0 and 1"
    return True, 0.0, ""


def _save_load() -> tuple[bool, float, str]:
    import torch

    generator = torch.Generator().manual_seed(0)
    state = {"float32": torch.randn(7, 5, generator=generator), "float16": torch.randn(9, generator=generator).half(),
             "bfloat16": torch.randn(4, 3, generator=generator).bfloat16(),
             "int64": torch.randint(-2**40, 2**40, (6,), generator=generator), "bool": torch.rand(5) > 0.5,
             "view": torch.arange(20.0)[::3]}
    expected = {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy().copy() for k, v in state.items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    for key, value in expected.items():
        got = loaded[key].float() if loaded[key].dtype == torch.bfloat16 else loaded[key]
        if loaded[key].dtype != state[key].dtype or not np.array_equal(got.numpy(), value):
            return False, 0.0, f"{key} changed in the save/load round trip"
    return True, 0.0, ""


SYSTEM_CHECKS: dict[str, Callable[[], tuple[bool, float, str]]] = {
    "DataLoader with 2 worker processes": _dataloader,
    "save/load round trip (weights_only=True)": _save_load,
}


def check_names() -> list[str]:
    return [case.name for case in CASES] + list(SYSTEM_CHECKS)


def run_checks(devices: Sequence[str] | None = None, names: Sequence[str] | None = None) -> list[CheckResult]:
    """Run the known-answer tests (all, or those ``names``) on ``devices`` (default: CPU, and CUDA if any)."""
    names, devices = name_list(names, "names"), name_list(devices, "devices")  # "cpu" is one, not 'c', 'p', 'u'
    _check_devices(devices or ())
    known = check_names()
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise ConfigError(f"unknown checks {unknown}; known: {known}.")
    chosen = set(names or known)
    results = case_results([c for c in CASES if c.name in chosen], list(devices or default_devices()))
    for name, check in SYSTEM_CHECKS.items():
        if name in chosen:
            results.append(_timed(name, 0.0, 0.0, check))
    return results


def _check_devices(devices: Sequence[str]) -> None:
    """A ConfigError, before any check runs, for a name torch reads as no device ('tpu') and for a CUDA
    device this machine lacks (each check failed with torch's "not compiled with CUDA")."""
    import torch

    for device in devices:
        try:
            kind = torch.device(device)
        except (RuntimeError, TypeError):
            raise ConfigError(f"devices: {device!r} is not a device name torch knows; use 'cpu', 'cuda', "
                              "'cuda:1' or 'mps'.") from None
        if kind.type == "cuda" and (kind.index or 0) >= torch.cuda.device_count():
            raise ConfigError(f"devices: {device!r}, but torch sees {torch.cuda.device_count()} CUDA device(s) "
                              f"here (torch {torch.__version__}); leave devices out to check what this machine "
                              "has.")


def format_results(results: Sequence[CheckResult]) -> str:
    """One line per check: ok / FAIL / skip, the largest error and the tolerance."""
    lines = []
    for r in results:
        status = "skip" if r.skipped else ("ok" if r.ok else "FAIL")
        if r.skipped:
            lines.append(f"{status:<5}{r.name}: {r.detail}")
            continue
        error = "" if r.max_error is None else f"  max error {r.max_error:.2g}"
        tolerance = "" if not r.atol and not r.rtol else f" (atol {r.atol:g}, rtol {r.rtol:g})"
        exact = " (exact)" if r.atol == 0 and r.rtol == 0 and r.ok else ""
        lines.append(f"{status:<5}{r.name}{error}{tolerance}{exact}" + (f"\n       {r.detail}" if r.detail else ""))
    failed = sum(not r.ok for r in results)
    lines.append(f"{len(results) - failed} of {len(results)} checks passed" + (f", {failed} FAILED" if failed else ""))
    return "\n".join(lines)
