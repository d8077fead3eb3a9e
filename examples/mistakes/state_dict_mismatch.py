"""Mistake: loading a 10-class checkpoint into a 5-class model for fine-tuning.

Run: torchwork doctor examples/mistakes/state_dict_mismatch.py
"""
import io

import torch
from torch import nn

torch.manual_seed(0)


def make_model(classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, classes))


pretrained = make_model(10)
buffer = io.BytesIO()
torch.save(pretrained.state_dict(), buffer)

model = make_model(5)
buffer.seek(0)
model.load_state_dict(torch.load(buffer, weights_only=True))  # doctor: state-dict-mismatch
