"""What :func:`~torchwork.deploy.export` is asked to do, in one typed, self-checking home.

:class:`ExportPlan` holds every setting of an export (formats, dynamic dims, what is bundled, the parity
tolerance and probes, INT8 quantization, verification, the C++ runner) and checks them all when it is
built, before any work starts. ``export(model, example_inputs, out_dir, plan)`` takes one; the flat keywords
(``export(model, x, out, formats=("onnx",), quantize="int8")``) are the shorthand that builds one, typed by
:class:`ExportKeywords` so that an editor completes them and a type checker flags a misspelt one.

Example:
    >>> from torchwork.deploy.plan import ExportPlan
    >>> plan = ExportPlan(formats="onnx,pt2", quantize="int8", batch_sizes=(1, 8))
    >>> plan.formats, plan.batch_sizes
    (['onnx', 'pt2'], [1, 8])
    >>> ExportPlan(formats=("pt2",), quantize="int8")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: quantize='int8' quantizes the ONNX variant: add 'onnx' to formats.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from torchwork.arguments import check_flag, name_list
from torchwork.deploy.fallback import check_agreement
from torchwork.deploy.manifest import FORMATS
from torchwork.deploy.parity import DEFAULT_ATOL, DEFAULT_RTOL, check_tolerances
from torchwork.deploy.quantize import DEFAULT_OPS, check_activations
from torchwork.deploy.smoothing import check_alpha
from torchwork.errors import ConfigError
from torchwork.quoting import quote_value

# a bound on export's dynamic length; past it torch.export's range is no length a model takes (16M tokens)
MAX_LENGTH_BOUND = 1 << 24
MAX_PROBE_BATCH = 65_536  # serve's --max-batch-size bound: a larger probe is no batch a server runs


def probe_sizes(name: str, values: Any, most: int) -> list[int]:
    """``values`` (the batch sizes or lengths the parity check probes) as a list of ints from 1 to ``most``;
    a ConfigError naming the first that is not one. A fraction is refused, not truncated (2.5 is not 2).

    Example:
        >>> probe_sizes("batch_sizes", (1, 8), 64)
        [1, 8]
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ConfigError(f"{name}={quote_value(values)}: pass a list of whole numbers, e.g. (1, 8).")
    sizes = list(values)
    bad = next((v for v in sizes if isinstance(v, bool) or not isinstance(v, numbers.Integral)
                or not 1 <= int(v) <= most), None)
    if not sizes or bad is not None:
        which = f"{quote_value(bad)} is not" if sizes else "none was given"
        raise ConfigError(f"{name}={quote_value(values)}: each must be a whole number from 1 to {most:,} "
                          f"({which}).")
    return [int(v) for v in sizes]


def parse_formats(formats: str | Iterable[str]) -> list[str]:
    """``"onnx,pt2"`` or ``("onnx", "pt2")`` -> a checked, de-duplicated list."""
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    chosen = list(dict.fromkeys(f.strip().lower() for f in items if f.strip()))
    unknown = [f for f in chosen if f not in FORMATS]
    if not chosen or unknown:
        raise ConfigError(f"formats={formats!r}: choose from {', '.join(FORMATS)} (e.g. 'pt2,onnx').")
    return chosen


@dataclass(frozen=True)
class ExportPlan:
    """What :func:`~torchwork.deploy.export` was asked to do, checked when built: the formats, the dynamic
    dims, what is bundled, the parity tolerance and probes (see :func:`~torchwork.deploy.export` for each
    setting). ``formats`` is kept as the checked list of names, ``batch_sizes`` as a list of ints and
    ``quantize_ops`` as a tuple."""

    formats: Sequence[str] = ("pt2", "onnx")
    dynamic_batch: bool = True
    dynamic_length: bool | None = None
    preprocess: Any = None
    input_names: Sequence[str] | None = None
    output_names: Sequence[str] | None = None
    labels: Sequence[str] | None = None
    softmax: bool = False
    samples: Any = None
    targets: Any = None
    sample_outputs: Any = None
    quantize: str | None = None
    quantize_ops: Sequence[str] = DEFAULT_OPS
    torchscript_method: str = "trace"
    strict: bool = True
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    batch_sizes: Sequence[int] = (1, 3, 64)
    lengths: Sequence[int] | None = None
    tolerance: float = 0.01
    verify_rounds: int = 20
    threads: int | None = None
    quantize_per_channel: bool = False
    quantize_smoothing: float | None = None
    calibration: Any = None
    quantize_attention_mask: str | None = None
    quantize_fallback_agreement: float | None = None
    quantize_fallback_margin: float | None = None
    deploy: str | None = None
    cpp: bool = False
    quantize_activations: str = "dynamic"
    quantize_reduce_range: bool = True
    max_length: int | None = None
    output: int | str | None = None

    def __post_init__(self) -> None:
        self._check_shapes()
        chosen = parse_formats(self.formats)
        quantize, calibration = self.quantize, self.calibration
        if quantize not in (None, "int8"):
            raise ConfigError(f"quantize={quantize!r}: the supported value is 'int8' (ONNX Runtime dynamic).")
        if quantize and "onnx" not in chosen:
            raise ConfigError("quantize='int8' quantizes the ONNX variant: add 'onnx' to formats.")
        if self.quantize_attention_mask is not None and not quantize:
            raise ConfigError("quantize_attention_mask fuses attention for INT8: pass quantize='int8' with it.")
        agreement = self.quantize_fallback_agreement
        if agreement is not None:
            check_agreement(agreement)
            problem = ("it needs quantize='int8'" if not quantize else "it needs calibration= (training or "
                       "validation rows)" if calibration is None or not len(calibration) else "it needs a dynamic "
                       "batch size" if not self.dynamic_batch else "it is for classifiers: pass labels= or "
                       "softmax=True" if self.labels is None and not self.softmax else None)
            if problem:
                raise ConfigError(f"quantize_fallback_agreement={agreement}: {problem}.")
        check_activations(self.quantize_activations)
        if self.quantize_activations == "static" and (not quantize or calibration is None or not len(calibration)):
            raise ConfigError("quantize_activations='static' fixes INT8 activation scales from calibration rows: "
                              "pass quantize='int8' and calibration= (validation rows).")
        if self.quantize_smoothing is not None:
            check_alpha(self.quantize_smoothing)
            if calibration is None or not len(calibration):
                raise ConfigError("quantize_smoothing needs calibration= (real training or validation inputs) to "
                                  "measure the activations' ranges on.")
        if not isinstance(self.quantize_reduce_range, bool):
            raise ConfigError(f"quantize_reduce_range={self.quantize_reduce_range!r}: pass True (7-bit weights, "
                              "exact on every x86 CPU) or False (8-bit weights, for CPUs with VNNI only).")
        if self.sample_outputs is not None and (self.samples is None or not len(self.samples)):
            raise ConfigError("sample_outputs are the eager model's outputs on samples=: pass the samples too.")
        if self.torchscript_method not in ("trace", "script"):
            raise ConfigError(f"torchscript_method={self.torchscript_method!r}: choose 'trace' or 'script'.")
        batch_sizes = probe_sizes("batch_sizes", self.batch_sizes, MAX_PROBE_BATCH)
        if self.lengths is not None:
            object.__setattr__(self, "lengths", probe_sizes("lengths", self.lengths, MAX_LENGTH_BOUND))
        if self.cpp and not {"pt2-aoti", "torchscript"} & set(chosen):
            raise ConfigError("cpp=True (--cpp) adds the C++ runner, which loads 'pt2-aoti' or 'torchscript': add "
                              "one of them to formats.")
        _check_length_bound(self.max_length, self.dynamic_length, self.lengths)
        check_tolerances(self.atol, self.rtol, self.tolerance, self.verify_rounds, rounds_name="verify_rounds")
        _check_output_choice(self.output)
        object.__setattr__(self, "formats", chosen)
        object.__setattr__(self, "quantize_ops", tuple(self.quantize_ops))
        object.__setattr__(self, "batch_sizes", batch_sizes)
        object.__setattr__(self, "cpp", bool(self.cpp))

    def _check_shapes(self) -> None:
        """Flags are bools (``strict="no"`` was strict, ``cpp="no"`` asked for the C++ runner) and lists of names
        are lists: ``quantize_ops="MatMul"`` was the ops 'M', 'a', 't', ... (refused only after every format was
        exported), ``labels="pos"`` three class names."""
        for name in ("dynamic_batch", "softmax", "strict", "quantize_per_channel", "cpp"):
            check_flag(getattr(self, name), name)
        if self.dynamic_length is not None:
            check_flag(self.dynamic_length, "dynamic_length")
        if isinstance(self.labels, str):
            raise ConfigError(f"labels={quote_value(self.labels)}: give the class names as a list, one per output "
                              "column (labels=['negative', 'positive']).")
        for name in ("quantize_ops", "input_names", "output_names", "labels"):
            object.__setattr__(self, name, name_list(getattr(self, name), name))

    @property
    def dim_bounds(self) -> dict[str, tuple[int, int]]:
        """``{dim name: (min, max)}`` for the dynamic dims exported up to a bound (``max_length``)."""
        return {"length": (1, self.max_length)} if self.max_length is not None else {}

    @classmethod
    def of(cls, plan: ExportPlan | None, keywords: Mapping[str, Any]) -> ExportPlan:
        """The plan from ``plan`` or from flat ``keywords`` (:class:`ExportKeywords`), not both."""
        for name in keywords:
            if name not in _FIELDS:
                raise TypeError(f"export() got an unexpected keyword argument {name!r}")
        if isinstance(plan, (str, list, tuple)) and "formats" not in keywords:
            keywords, plan = {**keywords, "formats": plan}, None  # the formats, where earlier versions took them
        if plan is None:
            return cls(**keywords)
        if not isinstance(plan, ExportPlan):
            raise ConfigError(f"export()'s fourth argument is an ExportPlan, got {type(plan).__name__}: pass "
                              "the formats by name (formats=...).")
        if keywords:
            names = ", ".join(f"{name}=" for name in keywords)
            raise ConfigError(f"{names} and an ExportPlan both given: put them into the plan "
                              f"(dataclasses.replace(plan, {next(iter(keywords))}=...)).")
        return plan


def _check_length_bound(max_length: Any, dynamic_length: bool | None, lengths: Sequence[int] | None) -> None:
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int) or not 2 <= max_length <= MAX_LENGTH_BOUND:
        raise ConfigError(f"max_length={quote_value(max_length)}: pass the longest sequence the model takes, an int of at "
                          f"least 2 (e.g. a GPT's block_size) and at most {MAX_LENGTH_BOUND:,}.")
    if dynamic_length is False:
        raise ConfigError(f"max_length={max_length} makes the length (dim 1) dynamic up to {max_length}, but "
                          "dynamic_length=False fixes it: drop one of them.")
    over = [n for n in lengths or () if int(n) > max_length]
    if over:
        raise ConfigError(f"lengths={list(lengths or ())} probes {over}, over max_length={max_length}: probe "
                          f"lengths up to {max_length}.")


def _check_output_choice(output: Any) -> None:
    if output is None or (isinstance(output, str) and output) or (
            isinstance(output, int) and not isinstance(output, bool) and output >= 0):
        return
    raise ConfigError(f"output={output!r}: name the one output to export by its index in the tuple forward() "
                      "returns (output=0) or by its key (output='logits' for a dict or a named tuple).")


_FIELDS = {f.name for f in dataclasses.fields(ExportPlan)}


class ExportKeywords(TypedDict, total=False):
    """The flat keywords ``export(...)`` takes instead of an :class:`ExportPlan`, typed, so that an editor
    completes them and a type checker flags a misspelt one (``export(model, x, out, quantise="int8")``).
    Each is a field of :class:`ExportPlan`; ``tests/deploy/test_plan.py`` keeps the two lists equal."""

    formats: str | Sequence[str]
    dynamic_batch: bool
    dynamic_length: bool | None
    preprocess: Any
    input_names: Sequence[str] | None
    output_names: Sequence[str] | None
    labels: Sequence[str] | None
    softmax: bool
    samples: Any
    targets: Any
    sample_outputs: Any
    quantize: str | None
    quantize_ops: Sequence[str]
    torchscript_method: str
    strict: bool
    atol: float
    rtol: float
    batch_sizes: Sequence[int]
    lengths: Sequence[int] | None
    tolerance: float
    verify_rounds: int
    threads: int | None
    quantize_per_channel: bool
    quantize_smoothing: float | None
    calibration: Any
    quantize_attention_mask: str | None
    quantize_fallback_agreement: float | None
    quantize_fallback_margin: float | None
    deploy: str | None
    cpp: bool
    quantize_activations: str
    quantize_reduce_range: bool
    max_length: int | None
    output: int | str | None
