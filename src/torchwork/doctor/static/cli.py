"""``torchwork doctor --static PATH... [--format text|json|sarif|github] [--check ID]``.

Exit codes: 0 when no finding is an error, 1 when one is (a CI build fails), 2 on bad usage (a path that
does not exist, an unknown check id: the command line's own errors).

Example (in a GitHub workflow, annotations on the pull request, the build failing on an error)::

    $ torchwork doctor --static . --format github
    ::error file=train.py,line=27,col=9,title=torchwork doctor [missing-zero-grad]::`optimizer.step()` ...
"""

from __future__ import annotations

import argparse
import json

from torchwork.doctor.static import formats
from torchwork.doctor.static.scan import scan_paths, select_rules


def cli_main(args: argparse.Namespace) -> int:
    """Scan ``args.script`` and ``args.args`` (the paths) and print the findings in ``args.format``."""
    paths = [args.script, *args.args]
    style = "json" if args.json else (args.format or "text")
    scan = scan_paths(paths, checks=args.check or None)
    if style == "json":
        print(formats.as_json(scan))
    elif style == "sarif":
        print(json.dumps(formats.sarif(scan, select_rules(args.check or None)), indent=2))
    elif style == "github":
        out = formats.github(scan)
        if out:
            print(out)
    else:
        print(formats.text(scan))
    return scan.exit_code
