"""Correct: a tutorial's synthetic data written in place, part by part, with no seed.

`images[k, 0, r0:r1, c0:c1] += 0.9` writes through a view on purpose (the statement names the tensor it
changes); the script trains once and prints its accuracy, so an unseeded run loses nothing.
Run: torchwork doctor examples/mistakes/correct_synthetic_data.py
"""
import torch
from torch import nn

images = torch.zeros(128, 1, 16, 16)
labels = torch.randint(0, 2, (128,))
for k in range(len(images)):
    r0, c0 = torch.randint(0, 8, (2,)).tolist()
    r1, c1 = r0 + 8, c0 + 8
    if labels[k] == 1:
        images[k, 0, r0:r1, c0:c1] += 0.9
    else:
        images[k, 0, r0:r1, c0] += 0.9
    images[k].add_(0.05 * torch.rand(1, 16, 16))

model = nn.Sequential(nn.Flatten(), nn.Linear(256, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(30):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
with torch.no_grad():
    accuracy = (model(images).argmax(1) == labels).float().mean().item()
print(f"loss {loss.item():.3f}, accuracy {accuracy:.2f}")
