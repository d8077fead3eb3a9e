"""The Trainer's ``threads=`` setting: an explicit count set at once, ``"auto"`` tuned on the CPU's real steps.

:class:`StepThreads` is the Trainer's bookkeeping of it (``trainer.cpu_threads``): the tuner, timing whole
iterations around each optimizer step, and :meth:`StepThreads.keep`, which ends the tuning with a count
(a compiled model's, or the one a resumed run had recorded).

Example:
    >>> import torch
    >>> from torchwork.distributed.env import World
    >>> auto, choice = thread_setting(1, torch.device("cpu"), World())
    >>> auto, choice.threads, torch.get_num_threads()
    (False, 1, 1)
    >>> threads = StepThreads(1, torch.device("cpu"), World())
    >>> threads.auto, threads.choice.reason
    (False, 'threads=1 as asked')
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchwork.threads import (
    CpuReader,
    ThreadChoice,
    ThreadTuner,
    check_threads,
    choose_threads,
    set_threads,
    usable_cpus,
)

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
        from_env = int(os.environ["OMP_NUM_THREADS"])
        check_threads(from_env, "OMP_NUM_THREADS")  # a million threads asked for: refused, not started
        set_threads(from_env)
        return False, ThreadChoice(from_env, "OMP_NUM_THREADS as set", usable_cpus())
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


class StepThreads:
    """torch's thread count over a Trainer's life: set once for a count, tuned on the real steps for
    ``"auto"`` on the CPU (each timed iteration runs from one step's start to the next's: the step, then the
    loop's own work and the next batch's fetch), until :meth:`keep` settles it. ``say`` gets the choices."""

    def __init__(self, threads: Any, device: torch.device, world: World,
                 say: Callable[[str], Any] | None = None) -> None:
        self.world, self.say = world, say
        self.auto, self._choice = thread_setting(threads, device, world)
        self.tuner: ThreadTuner | None = None
        self._reader: CpuReader | None = None
        self._started: float | None = None  # None: the next step starts a timed iteration afresh

    @property
    def choice(self) -> ThreadChoice | None:
        """The count in use and why (None under ``"auto"`` off the CPU, or before the first step)."""
        return self.tuner.choice if self.tuner is not None else self._choice

    def plan_fit(self, planned_steps: int | None, step: int) -> None:
        """A ``fit`` starts at optimizer step ``step`` and plans ``planned_steps`` in all (None: unknown):
        another fit of a tuning Trainer widens the timing budget by what is left; a first one reads the
        neighbours' CPU from here to its first step."""
        if self.tuner is not None:
            self.tuner.extend_plan(_left(planned_steps, step))
        elif self.auto:
            self._reader = cpu_reader()

    def restart_timing(self) -> None:
        """The next step starts a timed iteration afresh (after an epoch's start or an evaluation)."""
        self._started = None

    def pause(self) -> None:
        """Validation, and whatever follows the run, at the chosen count."""
        if self.tuner is not None:
            self.tuner.pause()

    def before_step(self, planned_steps: int | None, step: int) -> None:
        """Before optimizer step ``step`` of the ``planned_steps`` of the fit (None: unknown): the tuner is
        made at the first step (timing candidates takes at most 5% of the steps left), and an iteration's
        timing starts."""
        tuner = self.tuner
        if tuner is None and self.auto:
            tuner = self.tuner = thread_tuner(self.world, self.say, _left(planned_steps, step), self._reader)
        if tuner is not None and self._started is None:
            tuner.before_step()
            self._started = time.perf_counter()

    def after_step(self, samples: int) -> None:
        """After an optimizer step of ``samples``: the iteration is timed, and the next one starts."""
        if self.tuner is not None and self._started is not None:
            self.tuner.after_step(time.perf_counter() - self._started, samples)
            self.tuner.before_step()
            self._started = time.perf_counter()

    def keep(self, choice: ThreadChoice) -> None:
        """Under ``"auto"``, stop tuning and run with ``choice`` from now on (said); an explicit count (or
        OMP_NUM_THREADS) always wins, so then nothing changes."""
        if not self.auto:
            return
        self.auto, self.tuner, self._choice = False, None, choice
        set_threads(choice.threads)
        if self.say is not None:
            self.say(choice.describe())

    def keep_recorded(self, threads: int | None) -> None:
        """Continue with the count a resumed run had recorded: a count measured again on a machine that is
        busier or quieter now would change how every reduction is split, so the resumed run would not
        compute as the uninterrupted one."""
        if threads:
            self.keep(ThreadChoice(threads, "recorded by the run being resumed; threads=N to choose another",
                                   usable_cpus()))

    def keep_for_compiled(self) -> None:
        """A compiled model's graphs are guarded on torch's thread count (a change recompiles them): the
        count is chosen once, for the machine as it is now, and kept."""
        if self.auto:
            choice = choose_threads("auto")
            choice.reason += "; kept while compiled (a change of thread count recompiles)"
            self.keep(choice)


def _left(planned_steps: int | None, step: int) -> int | None:
    return None if planned_steps is None else max(0, planned_steps - step)
