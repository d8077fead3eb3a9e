"""Mistake: model.eval() for validation, and no model.train() before the next epoch trains.

Run: torchwork doctor examples/mistakes/train_mode.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(512, 16), torch.randint(0, 3, (512,))
x_val, y_val = torch.randn(128, 16), torch.randint(0, 3, (128,))
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

model.train()
for epoch in range(3):
    for i in range(0, 512, 64):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])  # doctor: train-mode
        loss.backward()
        optimizer.step()
    model.eval()  # evaluation done right ... but training continues in eval mode
    with torch.inference_mode():
        val_loss = nn.functional.cross_entropy(model(x_val), y_val)
    print(f"epoch {epoch}: val loss {val_loss.item():.3f}")
