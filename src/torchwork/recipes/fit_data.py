"""The first stage of ``torchwork fit`` and all of ``torchwork data check``: read the user's file (and test
file), audit it, and plan splits that cannot leak.

A test file is audited, not trusted: its rows are the ``test`` split, and a text it shares with the
training file is a ``cross-split-duplicate`` (an error until ``drop_leaked`` says what to do with them).

Example:
    >>> import pathlib, tempfile
    >>> from torchwork.recipes.fit_data import load_fit_data
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "tickets.csv"
    >>> rows = [f"printer {i} is on fire,it" for i in range(20)] + [f"payslip {i} missing,hr" for i in range(20)]
    >>> _ = path.write_text("text,team\\n" + "\\n".join(rows) + "\\n")
    >>> data = load_fit_data(path, label_noise=False, say=lambda line: None)
    >>> data.report.errors, {name: split["rows"] for name, split in data.report.splits.items()}
    ([], {'train': 32, 'validation': 4, 'test': 4})
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.data.findings import DataReport
from torchwork.data.split_findings import Layout, split_findings
from torchwork.data.splits import SplitPlan, given_split, grouped_split
from torchwork.data.tables import TextTable, describe_table, read_text_table
from torchwork.errors import DataError


@dataclasses.dataclass
class FitData:
    """The rows ``fit`` trains and tests on, the report about them and the split plan."""

    table: TextTable
    test_table: TextTable | None
    texts: list[str]
    labels: list[str]
    rows: list[int | str]
    report: DataReport
    plan: SplitPlan
    max_length: int | None
    plan_seed: int = 0

    @property
    def classes(self) -> list[str]:
        return sorted(set(self.labels))


def _combined(table: TextTable, test_table: TextTable | None, merged: dict[str, str]
              ) -> tuple[list[str], list[str], list[int | str], list[str] | None]:
    """The rows of both files, labels respelled as ``merged`` says, and each row's split (None: to be made)."""
    texts, labels, rows = list(table.texts), [merged.get(y, y) for y in table.labels], list[int | str](table.rows)
    splits = list(table.splits) if table.splits is not None else None
    if test_table is not None:
        test_labels = [merged.get(y, y) for y in test_table.labels]
        unknown = sorted(set(test_labels) - set(labels))
        if unknown:
            from torchwork.data.label_variants import label_key

            keys = {label_key(y): y for y in labels}
            alike = [f"{y!r} is {keys[label_key(y)]!r} there" for y in unknown if label_key(y) in keys]
            hint = (f" ({', '.join(alike[:5])}: --set merge_label_variants=true reads them as one class)"
                    if alike else "")
            raise DataError(f"{test_table.path} has classes the training file {table.path} has none of: "
                            f"{unknown[:5]}{hint}. A model cannot learn them: add rows of them to the training "
                            "file, or remove them from the test file.")
        own_tests = (splits or []).count("test")
        if own_tests:  # the two test sets were merged without a word
            raise DataError(f"{table.path} has test rows of its own ({own_tests:,}, split column "
                            f"{table.split_column!r}) and --test {test_table.path} gives more: give one test set "
                            "(drop --test, or mark those rows train or validation in the split column).")
        texts += test_table.texts
        labels += test_labels
        rows += [f"{test_table.path.name}:{r}" for r in test_table.rows]
        splits = (splits or ["train"] * len(table.texts)) + ["test"] * len(test_table.texts)
    return texts, labels, rows, splits


def check_classes(labels: Sequence[str], path: os.PathLike[str] | str) -> None:
    """A DataError, before any work, for data no classifier can be trained on: one class. (A class of one row
    is the report's ``rare-class`` and ``class-not-in-test`` errors: ``data check`` shows the whole report.)"""
    counts = Counter(labels)
    if len(counts) < 2:
        raise DataError(f"{path}: every row has the label {next(iter(counts))!r}; a classifier needs at least "
                        "2 classes. Check the label column (--label COL).")


def _model_lengths(texts: Sequence[str], model_folder: Any, say: Callable[[str], Any]) -> tuple[list[int] | None,
                                                                                             int | None]:
    """Each text's token count with the model's tokenizer, and the max_length their 95th percentile suggests."""
    from torchwork.errors import ConfigError
    from torchwork.finetune.max_length import choose_max_length, token_lengths

    try:
        if model_folder is None:
            from torchwork.finetune.encoders import minilm_folder

            model_folder = minilm_folder()
        lengths, limit = token_lengths(texts, model_folder)
    except (ConfigError, OSError) as error:
        say(f"no token lengths (the 'truncated' check is left out): {error}")
        return None, None
    return lengths, choose_max_length(lengths, limit)


def load_fit_data(data: str | os.PathLike[str], *, text: str | None = None, label: str | None = None,
                  test: str | os.PathLike[str] | None = None, seed: int = 0, drop_leaked: bool = False,
                  merge_label_variants: bool = False, model_folder: str | os.PathLike[str] | None = None,
                  max_length: int | None = None, label_noise: bool = True,
                  say: Callable[[str], Any] = print) -> FitData:
    """Read ``data`` (and ``test``), print what was read, audit the rows and plan the splits.

    ``drop_leaked`` removes the rows of a later split whose text is in an earlier one (the report still
    counts them); ``merge_label_variants`` reads the spellings of one class (``Positive``, ``positive``) as
    its most frequent one (else they are a ``label-variants`` error); ``model_folder`` gives the tokenizer
    that counts tokens (default: MiniLM's) and ``max_length`` the tokens the model will read (None: fit's
    default, the 95th percentile of the texts' token lengths, rounded up to 8: the ``truncated`` check is
    made against that).
    """
    from torchwork.data.label_variants import merged_spellings
    from torchwork.recipes.resumed_data import check_resumed_source

    table = read_text_table(data, text=text, label=label)
    test_table = read_text_table(test, text=table.text_column, label=table.label_column) if test else None
    check_resumed_source({"data": _file_source(table), **({"test": _file_source(test_table)} if test_table else {})})
    for line in describe_table(table) + (describe_table(test_table) if test_table else []):
        say(line)
    merged = merged_spellings(list(table.labels) + list(test_table.labels if test_table else [])) if (
        merge_label_variants) else {}
    if merged:
        say("label spellings merged: " + ", ".join(f"{old!r} -> {new!r}" for old, new in merged.items()))
    texts, labels, rows, splits = _combined(table, test_table, merged)
    check_classes(labels, data)
    lengths, suggested = _model_lengths(texts, model_folder, say)
    from torchwork.data.audit import audit_texts

    report = audit_texts(texts, labels, rows=rows, splits=splits, token_lengths=lengths,
                         max_length=max_length or suggested, suggested_length=suggested, label_noise=label_noise, seed=seed)
    plan = (given_split(texts, labels, splits, drop_leaked=drop_leaked, seed=seed) if splits is not None
            else grouped_split(texts, labels, seed=seed))
    report.splits = plan.counts()
    report.findings += split_findings(plan, _layout(splits is not None, test_table is not None))
    report.source = _source(table, test_table, plan, max_length or suggested)
    report.source["suggested_max_length"] = suggested
    report.source["max_length_from"] = "transformer_max_length" if max_length else "the texts' 95th percentile"
    report.source["merged_labels"] = merged
    report.source["drop_leaked"] = drop_leaked  # the leaked rows are then out of the later split's counts
    return FitData(table, test_table, texts, labels, rows, report, plan, max_length, seed)


def _layout(given: bool, test_file: bool) -> Layout:
    """How the rows are split, for the split findings' words: planned by torchwork, or the file's split
    column and test file."""
    where = "--test FILE" if test_file else "the split column"
    add = {split: f"add {split} rows of these classes ({where}), or remove their rows"
           for split in ("test", "validation")}
    return Layout("row", planned=not given, add=add,
                  empty_fix=f"give the split rows ({where}), or leave the splits to torchwork: drop the split "
                            "column and --test" if given else "")


def _file_source(table: TextTable) -> dict[str, Any]:
    return {"path": str(table.path), "fingerprint": table.fingerprint, "format": table.format,
            "encoding": table.encoding, "delimiter": table.delimiter, "rows": len(table.texts),
            "columns": {"text": table.text_column, "label": table.label_column, "split": table.split_column},
            "guessed": list(table.guessed)}


def _source(table: TextTable, test_table: TextTable | None, plan: SplitPlan, max_length: int | None
            ) -> dict[str, Any]:
    source = {"data": _file_source(table), "dropped": plan.dropped, "max_length": max_length}
    if test_table is not None:
        source["test"] = _file_source(test_table)
    return source


def blocking_errors(report: DataReport, drop_leaked: bool) -> list[str]:
    """The report's errors that training must not go past (leakage stops blocking once ``drop_leaked``)."""
    return [f"{f.kind}: {f.summary}; fix: {f.fix}" for f in report.errors
            if not (f.kind == "cross-split-duplicate" and drop_leaked)]


def fit_splits(data: FitData, cleaning: Any = None) -> Any:
    """The planned splits as a :class:`~torchwork.data.datasets.DatasetSplits`, each text cleaned
    (:func:`~torchwork.data.cleaning.clean_text`); a row that cleaning empties is left out."""
    from torchwork.data.cleaning import CleaningConfig, CleaningReport, clean_text
    from torchwork.data.datasets import DatasetSplits, TextDataset

    cleaning = cleaning or CleaningConfig()
    classes = data.classes
    parts, emptied = {}, 0
    for name, indices in data.plan.indices.items():
        cleaned = [(clean_text(data.texts[i], cleaning), classes.index(data.plan.labels[i])) for i in indices]
        kept = [(text, label) for text, label in cleaned if text]
        emptied += len(cleaned) - len(kept)
        parts[name] = TextDataset([t for t, _ in kept], [y for _, y in kept])
    report = CleaningReport(rows_in=len(data.texts), removed={**data.plan.dropped, "emptied by cleaning": emptied})
    return DatasetSplits(data.table.path.stem, parts["train"], parts["validation"], parts["test"], classes=classes,
                         source=f"{data.table.path} ({data.table.fingerprint})", seed=data.plan_seed,
                         cleaning=report)


def load_text_splits(config: Any, *, label_noise: bool = True, audit_bundled_rows: bool = True,
                     say: Callable[[str], Any] = print) -> tuple[Any, FitData | None, DataReport | None]:
    """The sentiment recipe's data and its data report: the bundled tweets (audited as shipped unless
    ``audit_bundled_rows`` is false, see :func:`audit_bundled`), or (``config.data``) the user's file read,
    audited and split by :func:`load_fit_data`; a DataError, before any training, when the user's file has
    errors."""
    from torchwork.data.datasets import load_dataset

    if not config.data:
        dataset = load_dataset("tweets", seed=config.seed)
        if not audit_bundled_rows:
            return dataset, None, None
        report = audit_bundled("tweets", dataset)
        for line in report.lines():  # what the cleaning then repairs
            say(line)
        return dataset, None, report
    data = load_fit_data(config.data, text=config.text or None, label=config.label or None,
                         test=config.test_data or None, seed=config.seed, drop_leaked=config.drop_leaked,
                         merge_label_variants=config.merge_label_variants,
                         model_folder=getattr(config, "model_dir", "") or None,
                         max_length=config.transformer_max_length or None, label_noise=label_noise, say=say)
    for line in data.report.lines():
        say(line)
    blocking = blocking_errors(data.report, config.drop_leaked)
    if blocking:
        raise DataError(f"{config.data}: the data report found {len(blocking)} error(s); nothing was trained. "
                        + " | ".join(blocking))
    return fit_splits(data), data, data.report


def audit_bundled(name: str, dataset: Any) -> DataReport:
    """The data report of a bundled text dataset's file as it ships (dirty on purpose: what the cleaning
    step then repairs), with the class counts of ``dataset``'s splits.

    The label-noise check is left out, as it is most of the report's time: ``torchwork data check FILE`` on
    the path in ``source`` runs it (16 s for the 38k tweets on a quiet 2-core machine).
    """
    from torchwork.data.audit import audit_texts
    from torchwork.data.datasets import bundled_text_rows

    path, texts, labels, _ = bundled_text_rows(name)
    report = audit_texts(texts, labels, label_noise=False)
    report.source = {"bundled": name, "path": str(path), "rows": len(texts),
                     "label_noise": f"not checked here; run: torchwork data check {path}"}
    report.splits = {split: {"rows": sum(counts), "classes": dict(zip(dataset.classes, counts, strict=True))}
                     for split, counts in dataset.counts().items()}
    return report
