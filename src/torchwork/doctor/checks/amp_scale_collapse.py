"""amp-scale-collapse: GradScaler's scale collapses, or most fp16 steps are skipped."""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.detectors import scale_collapse  # the guard's detector and thresholds


class _ScalerStats:
    __slots__ = ("initial", "last", "minimum", "updates", "skipped", "where")

    def __init__(self, scale: float, where: tuple[str, int] | None) -> None:
        self.initial = self.last = self.minimum = scale
        self.updates = self.skipped = 0
        self.where = where


class AmpScaleCollapse(Check, id="amp-scale-collapse", severity="warning"):
    def setup(self) -> None:
        self.scalers: dict[int, _ScalerStats] = {}

    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def update(scaler: Any, *args: Any, **kwargs: Any) -> Any:
                enabled = scaler.is_enabled()
                before = scaler.get_scale() if enabled else None
                result = original(scaler, *args, **kwargs)
                if enabled:
                    check.session.safely(check._record, scaler, before)
                return result
            return update

        self.session.patch(torch.amp.GradScaler, "update", make)

    def _record(self, scaler: Any, before: float) -> None:
        after = scaler.get_scale()
        stats = self.scalers.get(id(scaler))
        if stats is None:
            stats = self.scalers[id(scaler)] = _ScalerStats(before, self.session.where())
        stats.updates += 1
        if after < before:
            stats.skipped += 1
        stats.last, stats.minimum = after, min(stats.minimum, after)

    def finish(self) -> None:
        for stats in self.scalers.values():
            what = scale_collapse(stats.minimum, stats.initial, stats.updates, stats.skipped)
            if what is None:
                continue
            self.report(
                f"{what}: {stats.skipped} of {stats.updates} steps found inf/NaN gradients and were skipped. "
                "The fp16 gradients overflow even at small scales, so the model barely trains.",
                "Find the overflow: unnormalised inputs or targets, a loss summed instead of averaged, or an "
                "op that overflows in fp16 (keep it in fp32 with autocast(enabled=False)); prefer bf16 "
                "(torch.autocast(dtype=torch.bfloat16), no scaler needed) where the hardware supports it.",
                where=stats.where)
