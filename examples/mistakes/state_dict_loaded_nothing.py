"""Mistake: a checkpoint saved from a DDP-wrapped model ('module.' keys) loaded with strict=False loads nothing.

Run: torchwork doctor examples/mistakes/state_dict_loaded_nothing.py
"""
import torch
from torch import nn

torch.manual_seed(0)
trained = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
# What torch.save(ddp_model.state_dict(), path) stores: every key starts with "module."
checkpoint = {f"module.{key}": value for key, value in trained.state_dict().items()}

model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
result = model.load_state_dict(checkpoint, strict=False)  # doctor: state-dict-mismatch
print(f"loaded, {len(result.missing_keys)} keys missing")
