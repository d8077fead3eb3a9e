"""``torchwork data``: ``check`` (the data report of a user's file, or of an image folder with one sub-folder
per class) here; ``describe`` and ``profile`` in :mod:`torchwork.data.profile`.

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
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchwork.data.findings import DataReport


def cli_main(args: argparse.Namespace, *, label_noise: bool = True, say: Callable[[str], Any] = print) -> int:
    if args.data_command != "check":
        from torchwork.data.profile import cli_main as dataset_main

        return dataset_main(args)
    import orjson

    quiet = args.json
    if os.path.isdir(args.data):
        report = _image_report(args, (lambda line: None) if quiet else say)
    else:
        from torchwork.recipes.fit_data import load_fit_data
        from torchwork.recipes.sentiment import SentimentConfig

        report = load_fit_data(args.data, text=args.text, label=args.label, test=args.test, seed=args.seed,
                               max_length=SentimentConfig().transformer_max_length,  # what fit's MiniLM reads
                               label_noise=label_noise, say=(lambda line: None) if quiet else say).report
    if quiet:
        say(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        for line in report.lines():
            say(line)
    return 1 if report.errors else 0


def _image_report(args: argparse.Namespace, say: Callable[[str], Any]) -> DataReport:
    """The data report of the image folder ``args.data``; --text, --label and --test name a table's columns
    and a test file, and are refused."""
    from torchwork.data.image_audit import audit_images
    from torchwork.data.image_folder import read_image_folder
    from torchwork.errors import ConfigError

    given = [f"--{name}" for name in ("text", "label", "test") if getattr(args, name, None)]
    if given:
        raise ConfigError(f"{args.data} is an image folder: {', '.join(given)} apply to a text table only. The "
                          "classes are the folder's sub-folders and the test split its test/ folder; drop "
                          f"{', '.join(given)}.")
    data = read_image_folder(args.data)
    say(f"image folder {data.folder}: {len(data.rows):,} image files in {len(data.classes)} classes "
        f"({data.layout})")
    return audit_images(data, seed=args.seed,
                        progress=lambda done, total: say(f"  read {done:,} of {total:,} images"))
