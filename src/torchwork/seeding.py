"""Seed every random number generator a training run touches (data, engine and runs use it alike).

Example:
    >>> import random, torch
    >>> from torchwork.seeding import seed_everything
    >>> _ = seed_everything(7); a = (random.random(), torch.rand(1).item())
    >>> _ = seed_everything(7); b = (random.random(), torch.rand(1).item())
    >>> a == b
    True
"""

from __future__ import annotations

import math
import operator
import os
import random
import sys
from typing import Any, SupportsIndex, cast

from torchwork.finite import is_count
from torchwork.quoting import quote_value

_seed: int | None = None
_deterministic = False
SEED_LIMIT = 2**32  # NumPy's legacy seeding and scikit-learn's random_state take 32-bit seeds: [0, 2**32)


def seed_problem(seed: object, name: str = "seed") -> str | None:
    """What is wrong with ``seed`` as a seed every generator takes (an integer in ``[0, 2**32)``, what NumPy
    and scikit-learn accept), in words naming ``name`` (a setting, or a flag such as ``--seed``); None when
    it is fine. The one check of the commands and the recipes' configs, made when they are parsed.

    Example:
        >>> seed_problem(7) is None, seed_problem(-1)
        (True, 'seed=-1: must be >= 0')
        >>> print(seed_problem(2**32, "--seed"))
        --seed=4294967296: must be <= 4294967295 (2**32 - 1, the largest seed NumPy and scikit-learn take)
    """
    shown = quote_value(seed)  # not a 300-digit echo, nor an OverflowError past what a float holds
    if not is_count(seed, -math.inf, math.inf):  # numpy's and torch's integer scalars are seeds too
        return f"{name}={shown}: use an integer in [0, {SEED_LIMIT - 1}]"
    whole = operator.index(cast(SupportsIndex, seed))
    if whole < 0:
        return f"{name}={shown}: must be >= 0"
    if whole >= SEED_LIMIT:
        return (f"{name}={shown}: must be <= {SEED_LIMIT - 1} (2**32 - 1, the largest seed NumPy and "
                "scikit-learn take)")
    return None


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` when :func:`seed_problem` finds nothing wrong with it, else a ConfigError saying what it found.

    Example:
        >>> check_seed(3)
        3
        >>> check_seed(-1, "--seed")
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --seed=-1: must be >= 0.
    """
    problem = seed_problem(seed, name)
    if problem is not None:
        from torchwork.errors import ConfigError

        raise ConfigError(problem + ".")
    return operator.index(cast(SupportsIndex, seed))  # a plain int, numpy's int64 included


def seed_everything(seed: Any, deterministic: bool = False) -> int:
    """Seed Python, NumPy and torch (CPU and every CUDA device); DataLoader workers follow from torch.

    Each DataLoader iterator draws its workers' base seed from torch's global generator, so seeding
    torch seeds the workers too; :func:`seed_worker` also seeds NumPy and ``random`` inside each worker.
    ``deterministic=True`` also makes cuDNN and every op that has one choose a deterministic algorithm
    (and raise for those that have none). That costs some speed, so it is off by default.
    """
    import numpy as np
    import torch

    global _seed, _deterministic
    if not is_count(seed, 0, 2**63 - 1) or not isinstance(deterministic, bool):
        from torchwork.errors import ConfigError
        if not isinstance(deterministic, bool):
            raise ConfigError(f"deterministic={quote_value(deterministic)}: pass True or False.")
        raise ConfigError(f"seed={quote_value(seed)} must be an integer in [0, 2**63).")
    seed = operator.index(seed)  # numpy's int64 as a plain int: random.seed hashes other types differently
    random.seed(seed)
    np.random.seed(seed % 2**32)  # NumPy's legacy seeding accepts 32 bits only
    torch.manual_seed(seed)  # seeds the CPU and every CUDA device
    os.environ["PYTHONHASHSEED"] = str(seed)  # for subprocesses; this process's hash seed is already fixed
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic (CUDA >= 10.2)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)
        print("torchwork: deterministic algorithms on: runs are repeatable, at some cost in speed "
              "(cuDNN autotuning off, some CUDA kernels slower).", file=sys.stderr)
    _seed, _deterministic = seed, deterministic
    return seed


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` for DataLoader: derive NumPy and ``random`` seeds from the worker's torch seed."""
    import numpy as np
    import torch

    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def current_seed() -> dict[str, object]:
    """What :func:`seed_everything` set in this process (for the manifest); when it was not called,
    ``seed`` is None and ``torch_initial_seed`` is the seed torch drew for its default generator at start
    (what ``torch.manual_seed`` would need to repeat the weights' initialisation; Python's and NumPy's
    generators stay unknown)."""
    found: dict[str, object] = {"seed": _seed, "deterministic": _deterministic}
    if _seed is None and "torch" in sys.modules:
        found["torch_initial_seed"] = sys.modules["torch"].initial_seed()
    return found
