"""Pattern: https://discuss.pytorch.org/t/why-do-we-need-to-set-the-gradients-manually-to-zero-in-pytorch/4903
(gradient accumulation: gradients add up over backward passes until zero_grad clears them). Written here
from scratch: the step runs every 4 micro-batches, but zero_grad() sits inside the micro-batch loop, so
every window's first three micro-batches are thrown away and only the last one reaches the step.
"""
import torch
from torch import nn

torch.manual_seed(12)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(256, 10), torch.randint(0, 3, (256,))
accumulation = 4
for i, start in enumerate(range(0, 256, 16)):
    optimizer.zero_grad()  # expect: zero-grad-in-accumulation
    loss = nn.functional.cross_entropy(model(x[start:start + 16]), y[start:start + 16]) / accumulation
    loss.backward()
    if (i + 1) % accumulation == 0:
        optimizer.step()
print("last loss", loss.item() * accumulation)
