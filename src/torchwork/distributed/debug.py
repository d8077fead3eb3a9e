"""Debug mode for collectives: every rank must run the same collective, with the same shapes, in order.

PyTorch's own check (``TORCH_DISTRIBUTED_DEBUG=DETAIL``) crashes DDP on CPU in torch 2.13 (SIGSEGV while
DDP is constructed), so torchwork checks collectives itself: while debug mode is on, the collectives users
call through ``torch.distributed`` (``dist.all_reduce(...)`` and friends) first exchange a fingerprint (op,
shapes, dtypes, call site) over a separate gloo group, and raise on every rank, naming each rank's call
site, when they differ. Collectives DDP runs internally are not checked (they are consistent by design).
"""

from __future__ import annotations

import datetime
import functools
import traceback
from typing import Any

import torch
import torch.distributed as dist

CHECKED = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce", "reduce_scatter",
           "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier", "gather", "scatter",
           "broadcast_object_list", "all_gather_object", "gather_object")

_side_group: Any = None
_originals: dict[str, Any] = {}


def _call_site() -> str:
    from torchwork.distributed.frames import user_call_site

    return user_call_site(traceback.extract_stack()[:-2]) or "<unknown>"


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)}:{str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    return None if not isinstance(value, (int, str)) else type(value).__name__


def _checked(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from torchwork.errors import DistributedError

        mine = {"op": name, "args": _describe([a for a in args if isinstance(a, (torch.Tensor, list))]),
                "site": _call_site()}
        everyone: list[Any] = [None] * dist.get_world_size()
        try:
            dist.distributed_c10d.all_gather_object(everyone, mine, group=_side_group)
        except RuntimeError as error:
            raise DistributedError(
                f"rank {dist.get_rank()} called {name} at {mine['site']}, and not every rank reached a "
                f"collective within the debug timeout: some rank skipped this collective or is still "
                f"computing. ({str(error).splitlines()[0][:200]})") from None
        signatures = {(f["op"], str(f["args"])) for f in everyone}
        if len(signatures) > 1:
            lines = "; ".join(f"rank {r}: {f['op']}{f['args']} at {f['site']}" for r, f in enumerate(everyone))
            raise DistributedError(
                f"ranks ran different collectives (or the same one with different shapes): {lines}. Every "
                "rank must call the same collectives in the same order with the same shapes.")
        return original(*args, **kwargs)

    return wrapper


def enable(timeout_s: float = 60.0) -> None:
    """Check every user collective from now on (call on every rank, after the process group exists)."""
    global _side_group
    if _side_group is not None or not dist.is_initialized():
        return
    _side_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    for name in CHECKED:
        original = getattr(dist, name, None)
        if original is not None:
            _originals[name] = original
            setattr(dist, name, _checked(name, original))


def disable() -> None:
    global _side_group
    for name, original in _originals.items():
        setattr(dist, name, original)
    _originals.clear()
    _side_group = None
