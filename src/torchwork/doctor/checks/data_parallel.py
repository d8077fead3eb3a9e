"""data-parallel: ``nn.DataParallel`` in use."""

from __future__ import annotations

from typing import Any

from torch import nn

from torchwork.doctor.checks import Check


class DataParallelUse(Check, id="data-parallel", severity="warning"):
    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def __init__(module: nn.DataParallel, *args: Any, **kwargs: Any) -> None:
                original(module, *args, **kwargs)
                check.report(
                    "nn.DataParallel runs one process that copies the model to every GPU at each step and "
                    "gathers outputs on GPU 0: it is slower than DistributedDataParallel even on one machine, "
                    "unbalances memory, and is no longer recommended by PyTorch.",
                    "Use DistributedDataParallel with one process per GPU, launched by torchrun "
                    "(`torchrun --nproc_per_node=N train.py`); see torchwork.distributed.")
            return __init__

        self.session.patch(nn.DataParallel, "__init__", make)
