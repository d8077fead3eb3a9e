"""The Trainer's ``threads=`` setting: an explicit count set at once, ``"auto"`` tuned on the CPU's real steps.

Example:
    >>> import torch
    >>> from torchwork.distributed.env import World
    >>> auto, choice = thread_setting(1, torch.device("cpu"), World())
    >>> auto, choice.threads, torch.get_num_threads()
    (False, 1, 1)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchwork.threads import CpuReader, ThreadChoice, ThreadTuner, check_threads, set_threads, usable_cpus

if TYPE_CHECKING:
    import torch

    from torchwork.distributed.env import World


def thread_setting(threads: Any, device: torch.device, world: World) -> tuple[bool, ThreadChoice | None]:
    """(tune on the steps?, the choice made now): an explicit count is set here; ``"auto"`` is tuned on the
    first steps on the CPU (unless OMP_NUM_THREADS says the count), and leaves torch's threads alone on an
    accelerator."""
    explicit = check_threads(threads)
    if explicit is None and os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]):
        # Set, not assumed: torch reads the variable once, at start, and the count may have changed since.
        set_threads(int(os.environ["OMP_NUM_THREADS"]))
        return False, ThreadChoice(int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS as set", usable_cpus())
    if explicit is not None:
        set_threads(explicit)
        return False, ThreadChoice(explicit, f"threads={explicit} as asked", usable_cpus())
    return device.type == "cpu", None


def thread_tuner(world: World, say: Callable[[str], Any] | None, planned_steps: int | None = None,
                 reader: CpuReader | None = None) -> ThreadTuner:
    """The tuner of one process; ranks sharing a machine share its CPUs; ``say`` gets its choices; timing
    takes at most a share of the ``planned_steps`` (None: unknown); ``reader``: see :func:`cpu_reader`."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) if world.is_distributed else 1
    share = max(1, usable_cpus() // max(1, local))
    return ThreadTuner(usable=share, say=say, planned_steps=planned_steps, reader=reader)


def cpu_reader() -> CpuReader | None:
    """A reading of the machine's CPU begun at ``fit``'s start: the tuner made at the first step counts the
    time since (opening the run, the first batch) into its 0.1 s reading of the neighbours instead of
    waiting all of it (None where /proc cannot be read)."""
    try:
        return CpuReader()
    except OSError:
        return None
