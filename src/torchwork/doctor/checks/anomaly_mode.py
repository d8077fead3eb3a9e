"""anomaly-mode: ``torch.autograd.set_detect_anomaly(True)`` / ``detect_anomaly()`` left on while training.

Anomaly mode records a traceback for every operation of the forward pass and checks every gradient of the
backward pass for NaN: it is a tool to find the operation behind one NaN, not a setting to train with.
``benchmarks/anomaly_mode.py`` measures what it costs a training loop on two small real models (CPU, one
thread): 1.6x on a digits CNN and 2.1-2.3x on a two-layer character transformer (two runs); pytorch/ignite
PR #219 saw 2.4-2.6x. The finding is made when optimizer steps ran with it on (a training loop, two steps at least), at
the line that switched it on.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check

MEASURED = "1.6x on a small CNN, 2.1-2.3x on a small transformer (benchmarks/anomaly_mode.py)"
MIN_STEPS = 2  # one step under anomaly mode is a debugging session, not a training loop


class AnomalyMode(Check, id="anomaly-mode", severity="warning"):
    def setup(self) -> None:
        self.switched_on: tuple[str, int] | None = None
        self.steps = 0
        self.first_step: tuple[str, int] | None = None
        self.before = (False, True)

    def install(self) -> None:
        self.before = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        check = self

        def make(original: Any) -> Any:
            def set_anomaly_enabled(enabled: bool, *args: Any, **kwargs: Any) -> Any:
                if enabled and not torch.is_anomaly_enabled():
                    check.switched_on = check.session.where()
                return original(enabled, *args, **kwargs)
            return set_anomaly_enabled

        # set_detect_anomaly(True) and detect_anomaly() both call torch.set_anomaly_enabled, looked up at call time
        self.session.patch(torch, "set_anomaly_enabled", make)

    def uninstall(self) -> None:
        torch.set_anomaly_enabled(*self.before)  # as a new process would find it: the next script starts clean

    def on_step_post(self, optimizer: Any) -> None:
        if torch.is_anomaly_enabled():
            self.steps += 1
            if self.first_step is None:
                self.first_step = self.session.where()

    def finish(self) -> None:
        if self.steps < MIN_STEPS:
            return
        self.report(
            f"Anomaly detection was on for {self.steps} optimizer steps: it records a traceback for every "
            "forward operation and checks every gradient for NaN, which slows training down "
            f"(measured: {MEASURED}; more on larger graphs).",
            "Use anomaly mode only to find the operation behind a NaN, then remove it; keep it behind a debug "
            "flag: `torch.autograd.set_detect_anomaly(args.debug)`.", where=self.switched_on or self.first_step)
