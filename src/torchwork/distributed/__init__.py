"""Distributed training on PyTorch's own engine: torchrun, process groups, DDP, rank-aware helpers."""
