"""Mixed precision: which autocast dtype, whether a GradScaler is needed, and fp32 islands.

bf16 has fp32's exponent range, so it needs no loss scaling. fp16 does: small gradients underflow to zero,
so the loss is multiplied by a large scale before backward and the gradients are divided by it before
the optimizer sees them (GradScaler), skipping any step whose gradients came out inf/NaN.

Example:
    >>> import torch
    >>> from torchwork.engine.precision import resolve_precision
    >>> plan = resolve_precision("bf16", torch.device("cpu"))
    >>> plan.name, plan.dtype, plan.scaler is None
    ('bf16', torch.bfloat16, True)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from torchwork.errors import ConfigError

_ALIASES = {
    "32": "32", "fp32": "32", "32-true": "32", "float32": "32",
    "bf16": "bf16", "bf16-mixed": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "16": "fp16", "16-mixed": "fp16", "float16": "fp16",
}


NO_CONTEXT = contextlib.nullcontext()  # stateless and reusable: one per step would be a call more


@dataclass
class PrecisionPlan:
    """The resolved precision: ``name`` is "32", "bf16" or "fp16"."""

    name: str
    device_type: str
    dtype: torch.dtype | None
    scaler: Any | None  # torch.amp.GradScaler for fp16

    def autocast(self) -> Any:
        """The autocast context for a forward pass (a no-op context in fp32)."""
        if self.dtype is None:
            return NO_CONTEXT
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``; fp16: of the loss times the scale, so that small gradients do not underflow."""
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """fp16: divide the gradients by the scale (before clipping or reading them); else nothing."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """``optimizer.step()``; fp16: skipped when the gradients hold inf/NaN, then the scale is updated.
        Returns whether the optimizer stepped."""
        if self.scaler is None:
            optimizer.step()
            return True
        scale_before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        return self.scaler.get_scale() >= scale_before  # the scale only shrinks after a skipped step


def resolve_precision(precision: str | int, device: torch.device, scaler_kwargs: dict | None = None,
                      ) -> PrecisionPlan:
    """Validate ``precision`` for ``device`` and build the plan, before any step runs."""
    name = _ALIASES.get(str(precision).lower())
    if name is None:
        raise ConfigError(f"precision={precision!r} is not one of '32', 'bf16', 'fp16'.")
    if name == "32":
        return PrecisionPlan("32", device.type, None, None)
    if not torch.amp.is_autocast_available(device.type):
        raise ConfigError(f"precision={precision!r}: autocast is not available on device type "
                          f"{device.type!r}. Use precision='32' there.")
    if name == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"precision='bf16': {torch.cuda.get_device_name(device)} has no bfloat16 "
                              "support. Use precision='fp16' (with loss scaling) or '32'.")
        return PrecisionPlan("bf16", device.type, torch.bfloat16, None)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (5, 3):
            raise ConfigError(f"precision='fp16': compute capability {major}.{minor} has no fast fp16. "
                              "Use precision='32'.")
    elif device.type == "cpu":
        warnings.warn("precision='fp16' on the CPU is emulated and slow; it is useful for testing the fp16 "
                      "code path. On a CPU use precision='bf16' for speed.", stacklevel=3)
    elif device.type not in ("mps", "xpu"):
        raise ConfigError(f"precision='fp16' is not supported on {device.type!r}: GradScaler has no "
                          "implementation there. Use 'bf16' or '32'.")
    scaler = torch.amp.GradScaler(device.type, **(scaler_kwargs or {}))
    return PrecisionPlan("fp16", device.type, torch.float16, scaler)


class _Fp32Island:
    """Runs one submodule with autocast disabled and its floating inputs cast to float32."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.contexts: list[Any] = []

    def before(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        context = torch.autocast(self.device_type, enabled=False)
        context.__enter__()
        self.contexts.append(context)

        def to_fp32(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value.float()
            return value

        return tuple(to_fp32(a) for a in args), {k: to_fp32(v) for k, v in kwargs.items()}

    def after(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if self.contexts:
            self.contexts.pop().__exit__(None, None, None)


def keep_in_fp32(model: torch.nn.Module, selectors: Iterable[str | type], device_type: str) -> list[Any]:
    """Make the chosen submodules run in fp32 under autocast; returns the hook handles.

    A selector is a submodule's qualified name (``"encoder.norm"``) or a module class (``nn.LayerNorm``).
    """
    selectors = list(selectors)
    chosen = [(name, module) for name, module in model.named_modules()
              if any(name == s if isinstance(s, str) else isinstance(module, s) for s in selectors)]
    names = {name for name, _ in chosen}
    missing = [s for s in selectors if isinstance(s, str) and s not in names]
    if missing:
        available = ", ".join(name for name, _ in list(model.named_modules())[1:8])
        raise ConfigError(f"keep_fp32 names {missing}, which are not submodules of the model "
                          f"(some names: {available}).")
    handles = []
    for _, module in chosen:
        island = _Fp32Island(device_type)
        handles.append(module.register_forward_pre_hook(island.before, with_kwargs=True))
        handles.append(module.register_forward_hook(island.after, with_kwargs=True, always_call=True))
    return handles
