"""Surprise: clamping a column taken with indexing also changes the original tensor (it is a view).

Run: torchwork doctor examples/mistakes/view_mutation.py
"""
import torch

torch.manual_seed(0)
targets = torch.randn(8, 2) * 3
scores = targets[:, 0]  # a view into `targets`, not a copy
scores.clamp_(min=0)  # doctor: view-mutation
print("targets changed too:", (targets[:, 0] >= 0).all().item())
