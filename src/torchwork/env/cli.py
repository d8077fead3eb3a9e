"""``torchwork env`` and its actions: the report, ``check``, ``lock`` and ``diff``.

Exit codes: ``env`` 1 when a finding is an error; ``env check`` 1 when a check fails; ``env diff`` 1 when
the environments differ (like diff(1)); 2 for bad arguments (a torchwork error).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from torchwork.files import check_output_file


def _check(args: argparse.Namespace) -> int:
    from torchwork.env.known_answers import format_results, run_checks

    results = run_checks()
    if args.artifact:
        from torchwork.deploy.replay import replay_artifact

        results += replay_artifact(args.artifact)
    failed = any(not r.ok for r in results)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [r.to_dict() for r in results]}, indent=2))
    else:
        print(format_results(results))
    return 1 if failed else 0


def _lock(args: argparse.Namespace) -> int:
    from torchwork.env.lock import lock_text

    if args.output:
        # before the environment is read and anything is written
        check_output_file(args.output, "lock.txt", "the lock file", option="env lock -o")
    text = lock_text()
    if args.output:
        from torchwork.files import atomic_write

        with atomic_write(args.output, "w") as handle:
            handle.write(text)
        print(f"wrote {args.output}: {sum(not line.startswith('#') for line in text.splitlines())} pins",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _diff(args: argparse.Namespace) -> int:
    from torchwork.env.diff import diff_profiles, format_diff
    from torchwork.env.sources import load_profile

    a, b = load_profile(args.a), load_profile(args.b)
    differences = diff_profiles(a, b)
    if args.json:
        report: dict[str, Any] = {"a": {k: v for k, v in a.items() if k != "packages"},
                                  "b": {k: v for k, v in b.items() if k != "packages"},
                                  "differences": [d.to_dict() for d in differences]}
        print(json.dumps(report, indent=2))
    else:
        print(format_diff(a, b, differences))
    return 1 if differences else 0


def cli_main(args: argparse.Namespace) -> int:
    action = getattr(args, "env_command", None)
    if action == "check":
        return _check(args)
    if action == "lock":
        return _lock(args)
    if action == "diff":
        return _diff(args)
    from torchwork.env.report import main_report

    return main_report(bool(args.json))
