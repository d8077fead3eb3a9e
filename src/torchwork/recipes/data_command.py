"""``torchwork data``: ``check`` (the data report of a user's file) here; ``describe`` and ``profile`` in
:mod:`torchwork.data.profile`.

Example:
    >>> import argparse, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.csv"
    >>> _ = path.write_text("note,mood\\n" + "".join(f"day {i} was fine,up\\nday {i} was bad,down\\n" for i in range(9)))
    >>> args = argparse.Namespace(data_command="check", data=str(path), text=None, label=None, test=None, seed=0,
    ...                           json=False)
    >>> cli_main(args, label_noise=False, say=lambda line: None)
    0
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def cli_main(args: argparse.Namespace, *, label_noise: bool = True, say: Callable[[str], Any] = print) -> int:
    if args.data_command != "check":
        from torchwork.data.profile import cli_main as dataset_main

        return dataset_main(args)
    import orjson

    from torchwork.recipes.fit_data import load_fit_data

    quiet = args.json
    data = load_fit_data(args.data, text=args.text, label=args.label, test=args.test, seed=args.seed,
                         label_noise=label_noise, say=(lambda line: None) if quiet else say)
    if quiet:
        say(orjson.dumps(data.report.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        for line in data.report.lines():
            say(line)
    return 1 if data.report.errors else 0
