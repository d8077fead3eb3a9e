"""Mistake: a model compiled with dynamic=False gets a longer sequence every step (no length buckets):
it recompiles every step until Dynamo's recompile limit, then silently runs in eager.

backend="eager" keeps the example quick; the guards, recompiles and graph breaks are Dynamo's with any backend.
Run:
torchwork doctor examples/mistakes/recompiles.py
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(0, -1))
head = nn.Linear(8, 1)
compiled = torch.compile(model, dynamic=False, backend="eager")  # doctor: recompiles
optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)

for step in range(12):
    ids = torch.randint(0, 50, (1, 4 + step))  # one more token each step
    optimizer.zero_grad()
    hidden = compiled(ids)
    loss = head(hidden.view(-1, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
