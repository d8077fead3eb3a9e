"""Mistake: evaluation with model.eval() but without torch.no_grad(): every batch builds a graph for nothing.

Run: torchwork doctor examples/mistakes/inference_grad.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(512, 16), torch.randint(0, 3, (512,))
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for i in range(0, 512, 64):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
    optimizer.step()

model.eval()
predictions = []
for i in range(0, 512, 128):
    logits = model(x[i:i + 128])  # doctor: inference-grad
    predictions.append(logits.argmax(1))
print(f"accuracy {(torch.cat(predictions) == y).float().mean().item():.3f}")
