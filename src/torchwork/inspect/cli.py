"""``torchwork graph``: the autograd graph of a script's first backward (or of one line), or of a model alone.

* ``torchwork graph train.py [ARGS...]`` runs the script unmodified (the doctor's runner: same argv, path
  and error handling as ``python train.py``) and captures the graph of its first ``backward()``.
* ``--at FILE:LINE`` captures the tensor made on that line instead (the last operation of its first run).
* ``torchwork graph MODULE:FACTORY --input-shape 8,20`` builds the model from a function of no arguments
  (``package.module:build`` or ``path/file.py:build``, returning the model or ``{"model", "example_inputs"}``)
  and runs one forward on random inputs (or the factory's example inputs).

The page goes to ``graph.html`` (``-o`` to change); the text summary is printed.

Example:
    $ torchwork graph examples/mistakes/broken_graph.py
    $ torchwork graph mymodels.py:build --input-shape 8,20 -o mlp.html
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from torchwork.errors import ConfigError
from torchwork.files import check_output_file

MAX_INPUT_ELEMENTS = 2**28  # the random inputs' elements, all together: 1 GiB of float32, 2 GiB of int64
MAX_HIGH = 2**63 - 1  # the random ids are int64: --high is exclusive, so at most int64's largest value
INT_DTYPES = ("int64", "long")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``torchwork graph`` (no torch import)."""
    parser.add_argument("target", metavar="SCRIPT.py|MODULE:FACTORY",
                        help="a script to run unmodified (options before it), or a model factory "
                             "(package.module:build, file.py:build)")
    _add_options(parser)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--at", metavar="FILE:LINE", help="capture the tensor made on this line instead of the "
                                                          "first backward()")
    parser.add_argument("--input-shape", action="append", metavar="N,M,...",
                        help="with a factory: the shape of a random input (repeat for several inputs)")
    parser.add_argument("--input-dtype", default="float32",
                        help="with --input-shape: float32 (randn), or int64/long (random ids below --high)")
    parser.add_argument("--high", type=int, default=100, help="upper bound of random integer inputs (default 100)")
    parser.add_argument("-o", "--output", default="graph.html", help="the HTML page to write (default graph.html)")
    parser.add_argument("--no-dot", action="store_true", help="use the built-in layout even if Graphviz is installed")
    parser.add_argument("--run-on", action="store_true",
                        help="with a script: let it run to its end after the capture (default: stop it there, so "
                             "a training script does not train for the picture of its first backward)")


def is_factory(target: str) -> bool:
    """``pkg.mod:build`` or ``file.py:build`` (a callable to import), rather than a script path."""
    head, sep, name = target.rpartition(":")
    return bool(sep and head and name.isidentifier())


def parse_at(text: str) -> tuple[str, int]:
    file, sep, line = text.rpartition(":")
    if not sep or not file or not line.isdigit():
        raise ConfigError(f"--at {text!r}: write FILE:LINE, e.g. --at train.py:42.")
    return file, int(line)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(size <= 0 for size in shape):
        raise ConfigError(f"--input-shape {text!r}: write positive sizes separated by commas, e.g. 8,20.")
    return shape


def check_inputs(shapes: Sequence[tuple[int, ...]], dtype: str, high: int) -> None:
    """A :class:`ConfigError` for random inputs that cannot be made: ``--high`` below 1 or past int64 (int
    inputs), more than :data:`MAX_INPUT_ELEMENTS` elements in all.

    Example:
        >>> check_inputs([(8, 20)], "int64", 100)
        >>> check_inputs([(8, 20)], "int64", 0)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --high 0: the random ids are drawn from 0 to --high - 1, so it must be 1 or more (e.g. the model's vocabulary size).
    """
    if dtype in INT_DTYPES and not 1 <= high <= MAX_HIGH:
        raise ConfigError(f"--high {high}: the random ids are drawn from 0 to --high - 1, so it must be 1 or more "
                          "(e.g. the model's vocabulary size)." if high < 1 else
                          f"--high {high}: past the largest int64 ({MAX_HIGH}); give the model's vocabulary size.")
    elements = sum(math.prod(shape) for shape in shapes)
    if elements > MAX_INPUT_ELEMENTS:
        given = " ".join("--input-shape " + ",".join(map(str, shape)) for shape in shapes)
        raise ConfigError(f"{given}: {elements:,} elements in all, over the {MAX_INPUT_ELEMENTS:,} a random input "
                          "may have; give smaller shapes (a batch of 2 draws the same graph for most models).")


def cli_main(args: argparse.Namespace) -> int:
    """Entry point of ``torchwork graph``: every option checked before the script or the model runs."""
    if is_factory(args.target) and args.args:  # options after a factory are options, not script arguments
        options = argparse.ArgumentParser(prog="torchwork graph MODULE:FACTORY")
        _add_options(options)
        options.parse_args(args.args, namespace=args)
        args.args = []
    if args.input_dtype not in ("float32", "float", *INT_DTYPES):
        raise ConfigError(f"--input-dtype {args.input_dtype!r}: use float32 or int64.")
    check_output_file(args.output, "graph.html", "the page")
    if is_factory(args.target):
        if args.at or args.args:
            raise ConfigError("--at and script arguments go with a script, not with a model factory.")
        shapes = [parse_shape(s) for s in args.input_shape or ()]
        check_inputs(shapes, args.input_dtype, args.high)
        g = graph_of_factory(args.target, shapes, args.input_dtype, args.high)
        code = 0
    else:
        if args.input_shape:
            raise ConfigError("--input-shape goes with a model factory (MODULE:FACTORY), not with a script.")
        at = parse_at(args.at) if args.at else None
        g, code = graph_of_script(args.target, args.args, at, run_on=args.run_on)
    path = g.to_html(args.output, use_dot=False if args.no_dot else None)
    sys.stdout.flush()
    print("\n" + g.summary())
    print(f"\nwrote {path}")
    return code


def graph_of_factory(spec: str, shapes: list[tuple[int, ...]], dtype: str, high: int) -> Any:
    """The graph of the model ``spec`` builds, run once on random inputs of ``shapes`` (ids below ``high``
    for an int ``dtype``) or on the factory's example inputs."""
    import torch

    from torchwork.deploy.factory import load_factory
    from torchwork.inspect.tracing import trace

    check_inputs(shapes, dtype, high)
    made = load_factory(spec)()
    inputs: tuple = ()
    if isinstance(made, dict):
        model, inputs = made.get("model"), made.get("example_inputs", ())
    elif isinstance(made, tuple) and len(made) == 2:
        model, inputs = made
    else:
        model = made
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"the factory {spec} must return a torch.nn.Module (or {{'model', 'example_inputs'}}); "
                          f"it returned {type(model).__name__}.")
    ids = bool(shapes) and dtype in INT_DTYPES
    if ids:
        _check_high_fits(model, high)
    if shapes:
        make = (lambda s: torch.randint(0, high, s)) if ids else torch.randn
        inputs = tuple(make(shape) for shape in shapes)
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    if not inputs:
        raise ConfigError(f"no inputs for {spec}: pass --input-shape N,M (one per input), or return "
                          "{'model': ..., 'example_inputs': ...} from the factory.")
    try:
        return trace(model, *inputs)
    except IndexError as error:
        if not ids:
            raise
        raise ConfigError(f"--high {high}: the model indexed out of range on random ids below {high} "
                          f"({' '.join(str(error).split())}); give --high at most the size of the table the ids "
                          "index (e.g. the vocabulary).") from None


def _check_high_fits(model: Any, high: int) -> None:
    """A :class:`ConfigError` when ids below ``high`` would index past every embedding table of ``model``
    (when it has any: what else the ids index is not knowable before the model runs)."""
    import torch

    tables = {name: module.num_embeddings for name, module in model.named_modules()
              if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag))}
    if tables and high > max(tables.values()):
        name, size = max(tables.items(), key=lambda item: item[1])
        raise ConfigError(f"--high {high}: the random ids reach {high - 1}, past the model's largest embedding "
                          f"({repr(name) if name else 'the model itself'}, {size} entries); give --high {size} or "
                          "less.")


class GraphCaptured(BaseException):
    """Raised inside the script once its graph is built, to stop it there (a BaseException: a script's own
    ``except Exception`` does not swallow it)."""


class _ScriptGraph:
    """Builds the graph at the script's first backward(), or after the tensor at FILE:LINE was made; then
    stops the script unless ``run_on``."""

    def __init__(self, at: tuple[str, int] | None, run_on: bool = False) -> None:
        self.run_on = run_on
        self.at = (os.path.realpath(at[0]), at[1]) if at else None
        self.graph: Any = None
        self.candidate: Any = None
        self.capture: Any = None

    def on_output(self, tensor: Any, where: tuple[str, int]) -> None:
        if self.at is None or self.graph is not None:
            return
        if where[1] == self.at[1] and os.path.realpath(where[0]) == self.at[0]:
            self.candidate = tensor
        elif self.candidate is not None:
            self.build(self.candidate)

    def on_backward(self, tensor: Any) -> None:
        if self.graph is None:
            self.build(self.candidate if self.candidate is not None else tensor if self.at is None else None)

    def build(self, tensor: Any) -> None:
        if tensor is None or self.graph is not None:
            return
        from torchwork.inspect.graphs import graph

        self.capture.stopped = True
        self.graph = graph(tensor, capture=self.capture)
        self.candidate = None
        self.capture.release()
        if not self.run_on:
            raise GraphCaptured


def graph_of_script(script: str, script_args: list[str], at: tuple[str, int] | None,
                    run_on: bool = False) -> tuple[Any, int]:
    """The graph of ``script``'s first backward (or of the tensor made at ``at``); the script is stopped
    once it is captured unless ``run_on``. Returns the graph and the exit status to report."""
    from torchwork.doctor.runner import run_script
    from torchwork.inspect.recording import capture

    if not os.path.isfile(script):
        raise ConfigError(f"graph: no script {script!r}. Pass a Python file (torchwork graph train.py) or a "
                          "model factory (torchwork graph package.module:build --input-shape 8,20).")
    if at is not None and not os.path.isfile(at[0]):
        raise ConfigError(f"--at {at[0]}:{at[1]}: no file {at[0]!r}.")
    state = _ScriptGraph(at, run_on)
    with capture(on_output=state.on_output, on_backward=state.on_backward) as cap:
        state.capture = cap
        try:
            result = run_script(script, script_args, checks=())
            if state.graph is None:
                state.run_on = True  # the script has ended: nothing left to stop
                state.build(state.candidate)  # --at on the script's last operations
        except GraphCaptured:
            what = f"the tensor made at {at[0]}:{at[1]}" if at else "its first backward()"
            print(f"graph: stopped {script} at {what}, where the graph was captured (--run-on runs it to its "
                  "end)", file=sys.stderr)
            return state.graph, 0
    if state.graph is None:
        what = f"no tensor with an autograd history was made at {at[0]}:{at[1]}" if at else \
            "the script never called backward()"
        raise ConfigError(f"graph: {what} (the script exited with {result.script_exit}). "
                          + ("Check the line number (an operation on tensors that require grad must run there)."
                             if at else "Pass --at FILE:LINE to capture a tensor made on a given line."))
    return state.graph, 0 if result.script_exit == 0 else 1
