"""``torchwork doctor --static`` on real training repositories: findings per repository, each read by hand.

The repositories are the ones torch-preflight scanned in its spike 0002 (highwaterlabs/torch-preflight,
``design/spikes/0002-scanning-real-training-repos.md``): pytorch/examples, pytorch/tutorials, torchtune,
litgpt, trl, LLaMA-Factory and transformers' ``examples/pytorch``. This script fetches nothing: give it
local checkouts (never committed here) as ``NAME=PATH``; it scans each with every static rule, keeps the
fastest of ``--repeats`` wall times, and classifies each finding with :data:`VERDICTS`, the verdicts written
after reading every finding against its source:

- ``bug``: a real defect (the upstream fix or report is cited);
- ``true``: what the finding says holds (e.g. a load relies on PyTorch >= 2.6's ``weights_only`` default),
  a risk, not shown to be a bug;
- ``false``: a false alarm (the code is deliberately right);
- ``unread``: no verdict yet (a finding that appeared after the table was written: read it).

Goal (issue 51): the real ``zero_grad`` bug (pytorch/examples#1424) found, no error-severity false alarm.

Run: ``python benchmarks/doctor_static_real.py examples=/path/to/pytorch-examples torchtune=/path/... [--repeats 3]``
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path
from typing import Any

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

from torchwork.doctor.static import scan_paths

# (repository name, file relative to its root, line or None for every line, check id) -> (verdict, why)
VERDICTS: dict[tuple[str, str, int | None, str], tuple[str, str]] = {
    **{("examples", f"distributed/tensor_parallelism/{name}", line, "missing-zero-grad"):
       ("bug", "backward() and optimizer.step() in a loop, no zero_grad in the file: pytorch/examples#1424")
       for name, line in (("fsdp_tp_example.py", 172), ("sequence_parallel_example.py", 107),
                          ("tensor_parallel_example.py", 121))},
    ("torchtune", "tests/torchtune/models/llama2/scripts/compare_fused_attention.py", 207, "dropout-in-eval"):
        ("true", "dropout_p=self.attn_dropout not gated on self.training (a comparison script; harmless at 0.0)"),
    ("litgpt", "litgpt/api.py", 119, "state-dict-mismatch"):
        ("true", "lit_model.pth loaded with strict=False, report dropped; the keys match today, a rename would "
                 "load nothing silently"),
    ("litgpt", "tutorials/examples/ptl-trainer/litgpt_ptl_medium.py", 24, "state-dict-mismatch"):
        ("false", "base weights into a LoRA model: the missing LoRA keys are intended"),
}
# every finding of these checks in any repository: read one by one, the same verdict each time
VERDICTS_BY_CHECK: dict[str, tuple[str, str]] = {
    "unsafe-torch-load": ("true", "torch.load without weights_only=True (or with False): unpickles on PyTorch < "
                                  "2.6, or always with False; none loads files from elsewhere knowingly"),
}


def verdict(repo: str, file: str, line: int, check: str) -> tuple[str, str]:
    for key in ((repo, file, line, check), (repo, file, None, check)):
        if key in VERDICTS:
            return VERDICTS[key]
    return VERDICTS_BY_CHECK.get(check, ("unread", ""))


def scan_repository(name: str, root: Path, repeats: int) -> dict[str, Any]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        scan = scan_paths([root])
        times.append(time.perf_counter() - started)
    counts: collections.Counter[str] = collections.Counter()
    findings = []
    for f in scan.findings:
        relative = os.path.relpath(os.path.abspath(f.file), root).replace(os.sep, "/")
        label, why = verdict(name, relative, f.line, f.id)
        counts[f"{f.severity}:{label}"] += 1
        if f.id not in VERDICTS_BY_CHECK:
            findings.append({"check": f.id, "severity": f.severity, "where": f"{relative}:{f.line}",
                             "verdict": label, "why": why})
    return {
        "files": scan.files, "skipped": len(scan.skipped), "seconds": round(min(times), 3),
        "errors": sum(f.severity == "error" for f in scan.findings),
        "warnings": sum(f.severity == "warning" for f in scan.findings),
        "by_check": dict(collections.Counter(f"{f.id} ({f.severity})" for f in scan.findings)),
        "verdicts": dict(sorted(counts.items())), "findings": findings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", metavar="NAME=PATH", help="a local checkout of each repository")
    parser.add_argument("--repeats", type=int, default=3, help="scans per repository; the fastest counts")
    args = parser.parse_args()
    repos: dict[str, Any] = {}
    for item in args.checkouts:
        name, _, path = item.partition("=")
        root = Path(path)
        if not path or not root.is_dir():
            sys.exit(f"doctor_static_real: {item!r} is not NAME=PATH of a folder (a local checkout).")
        repos[name] = scan_repository(name, root, args.repeats)
        print(f"{name}: {repos[name]['files']} files, {repos[name]['errors']} errors, "
              f"{repos[name]['warnings']} warnings, {repos[name]['seconds']} s", file=sys.stderr)
    every = [v for r in repos.values() for v in r["verdicts"].items()]
    false_errors = sum(n for key, n in every if key == "error:false")
    bugs = sum(n for key, n in every if key.endswith(":bug"))
    record({"repositories": repos, "files": sum(r["files"] for r in repos.values()),
            "seconds": round(sum(r["seconds"] for r in repos.values()), 2), "bugs_found": bugs,
            "error_false_alarms": false_errors, "unread": sum(n for key, n in every if key.endswith(":unread")),
            "goal": "the zero_grad bug of pytorch/examples#1424 found, 0 error false alarms",
            "met": bugs >= 3 and false_errors == 0, "cpu": os.cpu_count()}, indent=2)


if __name__ == "__main__":
    main()
