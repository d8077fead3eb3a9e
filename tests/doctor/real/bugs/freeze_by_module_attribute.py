"""Pattern: https://discuss.pytorch.org/t/how-the-pytorch-freeze-network-in-some-layers-only-the-rest-of-the-training/7088
(freezing a pretrained backbone while a new head trains). Written here from scratch: the backbone is
"frozen" with `backbone.requires_grad = False`, an attribute on the nn.Module that freezes nothing; its
parameters keep requires_grad=True, are in the optimizer and keep training.
"""
import torch
from torch import nn

torch.manual_seed(13)
backbone = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24), nn.ReLU())
head = nn.Linear(24, 2)
backbone.requires_grad = False  # expect: requires-grad-attribute
model = nn.Sequential(backbone, head)
optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
x, y = torch.randn(64, 12), torch.randint(0, 2, (64,))
for _ in range(5):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
