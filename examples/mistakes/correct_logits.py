"""Correct: logits to the losses, probabilities only for predictions and as soft targets.

CrossEntropyLoss and BCEWithLogitsLoss get raw scores; softmax and sigmoid make the predictions and the
teacher's soft labels (a probability as the *target* is right).
Run: torchwork doctor examples/mistakes/correct_logits.py
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
x = torch.randn(256, 10)
labels = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()

teacher = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
student = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
optimizer = torch.optim.Adam([*teacher.parameters(), *student.parameters()], lr=1e-2)
for _ in range(20):
    optimizer.zero_grad()
    logits = teacher(x)
    soft = F.softmax(logits.detach() / 2.0, dim=1)
    loss = F.cross_entropy(logits, labels) + F.cross_entropy(student(x), soft)
    loss.backward()
    optimizer.step()
with torch.no_grad():
    print("accuracy", (teacher(x).softmax(dim=1).argmax(dim=1) == labels).float().mean().item())

scorer = nn.Linear(10, 1)
optimizer = torch.optim.Adam(scorer.parameters(), lr=1e-2)
for _ in range(20):
    optimizer.zero_grad()
    logit = scorer(x).squeeze(1)
    loss = F.binary_cross_entropy_with_logits(logit, torch.sigmoid(x[:, 0]))
    loss.backward()
    optimizer.step()
with torch.no_grad():
    print("positive rate", (torch.sigmoid(scorer(x)) > 0.5).float().mean().item())
