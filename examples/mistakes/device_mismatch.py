"""Mistake: the model is moved to the accelerator, the batch is not.

The `meta` device stands in for a GPU so that this runs anywhere; with device = "cuda" the error is
"Expected all tensors to be on the same device".
Run: torchwork doctor examples/mistakes/device_mismatch.py
"""
import torch
from torch import nn

torch.manual_seed(0)
device = torch.device("meta")  # stands in for torch.device("cuda")
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
x = torch.randn(8, 10)  # forgot: .to(device)
logits = model(x)  # doctor: device-mismatch
