"""Pattern: https://github.com/BatsResearch/labelmodels/issues/4 ("running_loss is the sum of non-detached
tensors": the graph of every batch stays alive and a large training set runs the GPU out of memory).
Written here from scratch: a small model over embedded votes, the epoch loss summed as a tensor.
"""
import torch
from torch import nn

torch.manual_seed(2)
votes = torch.randint(0, 4, (384, 5))
model = nn.Sequential(nn.Embedding(4, 6), nn.Flatten(), nn.Linear(30, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    epoch_loss = 0.0
    for batch in votes.split(48):
        optimizer.zero_grad()
        loss = -torch.logsumexp(model(batch).log_softmax(dim=1), dim=1).mean()
        loss.backward()
        optimizer.step()
        epoch_loss += loss  # expect: graph-kept-alive
    print(epoch, float(epoch_loss) / 8)
