"""loss-on-probabilities: a loss that applies softmax/sigmoid itself is given probabilities.

``nn.CrossEntropyLoss`` / ``F.cross_entropy`` take raw scores (logits) and apply ``log_softmax``;
``nn.BCEWithLogitsLoss`` / ``F.binary_cross_entropy_with_logits`` take logits and apply ``sigmoid``. Fed
the output of ``softmax`` or ``sigmoid``, they squash twice: the loss cannot fall near zero and the
gradients shrink, so training stalls at poor accuracy without any error. The check remembers the tensors
the last ``softmax``/``log_softmax``/``sigmoid`` calls returned (and views of them), and reports a loss
call whose input is one of them, at the loss's line, naming the line that squashed it.

``log_softmax`` before ``cross_entropy`` computes the same loss (log_softmax of log-probabilities changes
nothing), so it is a note: the work is done twice, or ``nll_loss`` was meant. A probability passed as the
*target* (soft labels, distillation) is right and is not looked at.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import Finding, format_where

SQUASH = frozenset({"softmax", "log_softmax", "sigmoid"})
LOSSES = {"cross_entropy": ("softmax", "log_softmax"), "binary_cross_entropy_with_logits": ("sigmoid",)}
KEEP = 64  # the most recent squashed outputs remembered


class LossOnProbabilities(Check, id="loss-on-probabilities", severity="warning",
                          ops=SQUASH | frozenset(LOSSES)):
    def setup(self) -> None:
        # id(output) -> (a weak reference to it, the squashing function, the user's line)
        self.recent: collections.OrderedDict[int, tuple[weakref.ReferenceType[torch.Tensor], str,
                                                        tuple[str, int] | None]] = collections.OrderedDict()
        # one finding per squashing line: (loss, squash, its line) -> (the finding, its first message, the loss
        # lines it reached, the finding's own first)
        self.by_cause: dict[tuple[str, str, tuple[str, int]], tuple[Finding, str, list[str]]] = {}

    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        name = getattr(func, "__name__", "")
        if name in SQUASH:
            if isinstance(out, torch.Tensor):
                self._remember(out, name)
            return
        logits = args[0] if args else kwargs.get("input")
        if not isinstance(logits, torch.Tensor) or not self.recent:
            return
        squashed = self._squashed(logits)
        if squashed is None or squashed[0] not in LOSSES[name]:
            return
        self._report(name, *squashed)

    def _remember(self, out: torch.Tensor, name: str) -> None:
        recent = self.recent
        recent[id(out)] = (weakref.ref(out), name, self.session.where())
        recent.move_to_end(id(out))
        while len(recent) > KEEP:
            recent.popitem(last=False)

    def _squashed(self, tensor: torch.Tensor) -> tuple[str, tuple[str, int] | None] | None:
        for candidate in (tensor, tensor._base):
            if candidate is None:
                continue
            entry = self.recent.get(id(candidate))
            if entry is not None and entry[0]() is candidate:
                return entry[1], entry[2]
        return None

    def _report(self, loss: str, squash: str, squashed_at: tuple[str, int] | None) -> None:
        """One finding per squashing line, at the first loss call it reached; the other loss calls it reaches
        (a GAN's generator and discriminator losses on one classifier head) are named in it."""
        cause = (loss, squash, squashed_at) if squashed_at else None
        known = self.by_cause.get(cause) if cause else None
        here = format_where(self.session.where())
        if known is not None:
            finding, message, lines = known
            finding.count += 1
            if here not in lines and len(lines) < 6:
                lines.append(here)
                finding.message = f"{message} The same {squash} output reaches {loss} at {', '.join(lines[1:])} too."
            return
        finding = self._first_report(loss, squash, squashed_at)
        if cause:
            self.by_cause[cause] = (finding, finding.message, [here])

    def _first_report(self, loss: str, squash: str, squashed_at: tuple[str, int] | None) -> Finding:
        at = f" at {format_where(squashed_at)}" if squashed_at else ""
        if loss == "binary_cross_entropy_with_logits":
            return self.report(
                f"binary_cross_entropy_with_logits (BCEWithLogitsLoss) was given the output of sigmoid{at} as "
                "its input: it applies sigmoid itself, so the predictions were squashed twice (into "
                "0.5-0.73): the loss cannot approach zero and the gradients shrink; training stalls.",
                "Pass the raw scores (logits): drop the sigmoid before the loss and apply torch.sigmoid only "
                "to make predictions; or keep the sigmoid and use nn.BCELoss.")
        if squash == "log_softmax":
            return self.report(
                f"cross_entropy (CrossEntropyLoss) was given the output of log_softmax{at}: it applies "
                "log_softmax itself. The loss is the same (log_softmax of log-probabilities changes nothing), "
                "but it is computed twice.",
                "Pass the logits to CrossEntropyLoss, or keep log_softmax and use nn.NLLLoss.",
                severity="info")
        return self.report(
            f"cross_entropy (CrossEntropyLoss) was given the output of softmax{at} as its input: it applies "
            "log_softmax itself, so it computed log(softmax(softmax(x))): the probabilities are squashed "
            "twice, the loss cannot approach zero and the gradients shrink; training stalls at poor accuracy.",
            "Pass the raw scores (logits): remove the softmax from the model's forward (apply it only to "
            "make predictions: probs = logits.softmax(dim=1)); or keep it and use nn.NLLLoss on its log.")
