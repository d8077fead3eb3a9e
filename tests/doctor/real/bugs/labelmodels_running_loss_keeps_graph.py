"""Source: https://github.com/BatsResearch/labelmodels/issues/4 (labelmodels/label_model.py#L90 at commit
3b5683bef7ee902dc205a8cd93572b05b88dbad5): "You're holding on to the graph for each batch per epoch, since
`running_loss` is the sum of non-detached tensors. For a large enough training set my GPU runs out of memory".

The label model's training loop: running_loss += loss per batch, printed at the end of each epoch.
A small linear label model on random votes.
"""
import torch
from torch import nn

torch.manual_seed(0)
num_lfs, num_classes = 6, 3
votes = torch.randint(0, num_classes + 1, (512, num_lfs))
model = nn.Sequential(nn.Embedding(num_classes + 1, 8), nn.Flatten(), nn.Linear(8 * num_lfs, num_classes))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batches = votes.split(32)
for epoch in range(2):
    running_loss = 0.0
    for batch in batches:
        optimizer.zero_grad()
        log_probs = torch.log_softmax(model(batch), dim=1)
        loss = -torch.logsumexp(log_probs, dim=1).mean()
        loss.backward()
        optimizer.step()
        running_loss += loss  # expect: graph-kept-alive
    print("Epoch {}: loss {:.4f}".format(epoch + 1, running_loss / len(batches)))
