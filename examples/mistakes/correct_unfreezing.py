"""Correct: gradual unfreezing with torchwork.finetune. The body starts frozen with its BatchNorm kept in
eval mode after every model.train(); at epoch 1 it is unfrozen and added to the optimizer by identity
with its planned (lower) learning rate, so every parameter that gets gradients is trained.

Run: torchwork doctor examples/mistakes/correct_unfreezing.py
"""
import torch
from sklearn.datasets import load_digits
from torch import nn

from torchwork.finetune import GradualUnfreezing, freeze, keep_frozen_norms_in_eval, param_groups

torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.data[:512] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target[:512])

model = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
freeze(model, "0", "1")
plan = param_groups(model, lr=1e-2, head="3", layers=["0", "1"], layer_decay=0.3)
optimizer = torch.optim.AdamW(plan)
unfreezing = GradualUnfreezing(optimizer, plan, {1: ["0", "1"]})
for epoch in range(3):
    unfreezing.unfreeze_for_epoch(epoch)
    model.train()
    keep_frozen_norms_in_eval(model)  # the frozen BatchNorm keeps its pretrained statistics
    for i in range(0, len(x), 64):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}, {len(optimizer.param_groups)} optimizer groups")
print(plan.table(optimizer))
