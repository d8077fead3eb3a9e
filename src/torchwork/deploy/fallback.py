"""INT8 with a float fallback: rows the quantized classifier is unsure of are answered by the exact variant.

Dynamic INT8 changes a classifier's answer only where its top two classes are close. On the fine-tuned
MiniLM (3,600 test tweets) the INT8 graph agreed with float on 97.5% of them; running again in float the 5%
of rows with the smallest top-2 probability margin raised that to 99.2%, the lowest 10% to 99.7%.

:func:`choose_margin` picks the margin on calibration rows (validation rows: not the held-out ones that
verify the result, and not the training rows either, on which the model is surer than on new data): the
smallest that brings INT8's agreement with float there to the asked share. The
artifact records it on the INT8 variant (``fallback: {"variant": "onnx", "margin": ...}``) and
:func:`fallback_runner` applies it wherever the artifact runs (``verify``, ``load_artifact``, ``torchwork
serve``), so what was verified is what is served.

A transformer's rows are padded to the longest of their batch. When the export names the padding mask
(``quantize_attention_mask``), the fallback records its name (``"padding_mask": "attention_mask"``) and the
unsure rows run again cut to the longest of *them*: the trailing columns where every one of them is padding
are dropped from each input that shares the mask's dynamic length axis (found in the manifest's inputs when
the artifact loads). With right padding and a mask the model honours, those columns change nothing in the
rows' answers; only trailing columns are cut, so positions do not move.

Example:
    >>> import numpy as np
    >>> exact = np.array([[2.0, 0.0], [0.1, 0.0], [0.0, 3.0]])
    >>> quantized = np.array([[1.9, 0.0], [0.0, 0.1], [0.0, 2.9]])   # row 1 flips, with a small margin
    >>> choose_margin(exact, quantized, agreement=1.0)["margin"] > 0
    True
    >>> choose_margin(exact, quantized, agreement=0.6)["margin"] is None   # 2 of 3 agree already
    True
    >>> kept = choose_margin(exact, quantized, agreement=0.6, fixed=0.5)     # a resumed run's own margin
    >>> kept["margin"], kept["agreement_with"]
    (0.5, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchwork.deploy import progress
from torchwork.deploy.runtime import Runner, onnx_session, run_session, softmax
from torchwork.errors import ConfigError


def check_agreement(agreement: float) -> float:
    """``agreement`` as a float in (0, 1], or a :class:`~torchwork.errors.ConfigError` saying why not."""
    value = float(agreement)
    if not 0.0 < value <= 1.0:  # also refuses NaN
        raise ConfigError(f"fallback agreement={agreement!r} must be in (0, 1]: the share of calibration rows on "
                          "which INT8 plus its float fallback must give float's answer (e.g. 0.995).")
    return value


def margins(logits: Any) -> Any:
    """The top-2 probability margin of each row (softmax over the last axis), as a numpy array."""
    import numpy as np

    top = np.sort(softmax(np.asarray(logits)), axis=-1)
    return top[:, -1] - top[:, -2]


def choose_margin(exact: Any, quantized: Any, agreement: float, fixed: float | None = None) -> dict[str, Any]:
    """The smallest margin whose fallback makes ``quantized`` agree with ``exact`` on ``agreement`` of the
    rows (``margin`` None when it does already), with what it measured; ``fixed``: that margin instead (a
    resumed run keeps the one it chose), measured the same way."""
    import numpy as np

    agreement = check_agreement(agreement)
    exact, quantized = np.asarray(exact), np.asarray(quantized)
    rows = len(exact)
    if rows == 0 or exact.shape != quantized.shape:
        raise ConfigError(f"the fallback margin needs the outputs of both variants on the same calibration rows "
                          f"(got shapes {exact.shape} and {quantized.shape}).")
    flips = exact.argmax(-1) != quantized.argmax(-1)
    margin = margins(quantized)
    allowed = int(np.floor((1.0 - agreement) * rows + 1e-9))  # flips that may stay
    flipped = np.sort(margin[flips])[::-1]
    chosen = None if len(flipped) <= allowed else float(flipped[allowed])
    if fixed is not None:
        chosen = float(fixed)
    rerun = margin <= chosen if chosen is not None else np.zeros(rows, dtype=bool)
    return {"margin": chosen, "calibration_rows": rows,
            "agreement_without": round(float(1 - flips.mean()), 6),
            "agreement_with": round(float(1 - (flips & ~rerun).mean()), 6),
            "rows_rerun": round(float(rerun.mean()), 6)}


def fallback_runner(quantized: Runner, exact: Runner, margin: float, padding_mask: int | None = None,
                    padded_inputs: Sequence[int] = ()) -> Runner:
    """A runner that answers with ``quantized``, and again with ``exact`` the rows whose top-2 margin (on
    the first output's softmax) is ``<= margin``; every output of those rows is replaced. ``padding_mask``:
    the index of the inputs' 2-D padding mask (1 on real tokens, right-padded); the unsure rows then run cut
    to their own longest, on the inputs ``padded_inputs`` (the mask's among them)."""
    import torch

    def run(inputs: Sequence[Any]) -> list[Any]:
        outputs = list(quantized(inputs))
        unsure = torch.from_numpy(margins(outputs[0].float().numpy()) <= margin).nonzero().flatten()
        if len(unsure):
            rows = [t[unsure] for t in inputs]
            if padding_mask is not None:
                rows = trimmed_to_longest(rows, padding_mask, padded_inputs)
            again = exact(rows)
            outputs = [o.clone() for o in outputs]
            for out, replacement in zip(outputs, again):
                out[unsure] = replacement.to(out.dtype)
        return outputs

    return run


def trimmed_to_longest(inputs: Sequence[Any], padding_mask: int, padded_inputs: Sequence[int]) -> list[Any]:
    """``inputs`` with the trailing columns on which every row's ``padding_mask`` is 0 dropped from the inputs
    ``padded_inputs`` (their axis 1), keeping at least one column.

    Example:
        >>> import torch
        >>> ids, mask = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]]), torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
        >>> [t.tolist() for t in trimmed_to_longest([ids, mask], 1, (0, 1))]
        [[[5, 6], [7, 0]], [[1, 1], [1, 0]]]
    """
    mask = inputs[padding_mask]
    used = mask.ne(0).any(dim=0).nonzero()
    width = int(used[-1]) + 1 if len(used) else 1
    if width == mask.shape[1]:
        return list(inputs)
    return [t[:, :width] if i in padded_inputs else t for i, t in enumerate(inputs)]


def measure_margin(exact_path: Any, quantized_path: Any, feeds: Sequence[dict[str, Any]], agreement: float,
                   threads: int | None = None, fixed: float | None = None,
                   exact_outputs: Any = None) -> dict[str, Any]:
    """:func:`choose_margin` on two ONNX files' first outputs over the calibration ``feeds``;
    ``exact_outputs``: the exact variant's first outputs on ``feeds`` when they are in hand already (the
    float calibration pass), so that only the quantized file runs."""
    import numpy as np

    paths = (quantized_path,) if exact_outputs is not None else (exact_path, quantized_path)
    first = [] if exact_outputs is None else [np.asarray(exact_outputs)]
    for done, path in enumerate(paths):
        session = onnx_session(path, threads)
        outputs = []
        for feed in feeds:
            outputs.append(run_session(session, None, feed)[0])
            progress.rows(done * len(feeds) + len(outputs))
        first.append(np.concatenate(outputs))
    return choose_margin(first[0], first[1], agreement, fixed)
