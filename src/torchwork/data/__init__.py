"""Real datasets, users' labelled text files (CSV, TSV, JSON Lines, Parquet) and image folders, text
cleaning and tokenizing, class balance, loaders and input-pipeline profiling.

Names are imported lazily: ``import torchwork.data`` imports neither torch nor scikit-learn.

Example:
    >>> import torchwork.data as data
    >>> data.clean_text("Great flight @united!! http://t.co/x")
    'great flight <user>!! <url>'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_package

# public name -> module that defines it
# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.lazy_package reads them back and each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.data.audit import audit_texts  # noqa: F401
    from torchwork.data.balance import balanced_sampler, class_weights  # noqa: F401
    from torchwork.data.cleaning import CleaningConfig, CleaningReport, clean_text, clean_texts  # noqa: F401
    from torchwork.data.datasets import DatasetSplits, ImageDataset, TextDataset, load_dataset  # noqa: F401
    from torchwork.data.findings import DataReport, Finding  # noqa: F401
    from torchwork.data.image_audit import audit_images  # noqa: F401
    from torchwork.data.image_folder import ImageFolderData, read_image_folder  # noqa: F401
    from torchwork.data.intervals import paired_macro_f1  # noqa: F401
    from torchwork.data.label_noise import label_noise_candidates  # noqa: F401
    from torchwork.data.loaders import default_num_workers, loader, seed_worker  # noqa: F401
    from torchwork.data.metrics import classification_metrics, format_metrics  # noqa: F401
    from torchwork.data.profile import ProfileReport, profile_loader  # noqa: F401
    from torchwork.data.splits import SplitPlan, grouped_split, stratified_split  # noqa: F401
    from torchwork.data.tables import TextTable, describe_table, read_text_table  # noqa: F401
    from torchwork.data.text import TextCollate, TextPreprocessor  # noqa: F401
    from torchwork.data.text_checks import match_key  # noqa: F401

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
