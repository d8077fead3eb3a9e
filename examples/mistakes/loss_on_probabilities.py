"""Mistake: a model that ends in softmax trained with CrossEntropyLoss, and a sigmoid fed to BCEWithLogitsLoss.

Both losses squash their input themselves: given probabilities they squash twice, and training stalls.
Run: torchwork doctor examples/mistakes/loss_on_probabilities.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(256, 10)
labels = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()

classifier = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3), nn.Softmax(dim=1))
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-2)
for _ in range(20):
    optimizer.zero_grad()
    loss = loss_fn(classifier(x), labels)  # doctor: loss-on-probabilities
    loss.backward()
    optimizer.step()

scorer = nn.Linear(10, 1)
optimizer = torch.optim.Adam(scorer.parameters(), lr=1e-2)
for _ in range(20):
    optimizer.zero_grad()
    probability = torch.sigmoid(scorer(x)).squeeze(1)
    loss = nn.functional.binary_cross_entropy_with_logits(probability, (labels > 0).float())  # doctor: loss-on-probabilities
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.3f}")
