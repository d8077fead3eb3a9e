"""Pattern: https://github.com/optuna/optuna/pull/1725 (model.train() was called once before the epoch
loop, the validation inside the loop called model.eval(), so every epoch after the first trained with
dropout off). Written here from scratch: an MLP with Dropout built layer by layer.
"""
import torch
from torch import nn

torch.manual_seed(6)
layers, width = [], 100
for size, p in ((48, 0.3), (24, 0.2)):
    layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(p)]
    width = size
net = nn.Sequential(*layers, nn.Linear(width, 10))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
train_x, train_y = torch.randn(96, 100), torch.randint(0, 10, (96,))
val_x, val_y = torch.randn(48, 100), torch.randint(0, 10, (48,))
net.train()
for epoch in range(3):
    for start in range(0, 96, 24):
        opt.zero_grad()
        logits = net(train_x[start:start + 24])  # expect: train-mode
        nn.functional.cross_entropy(logits, train_y[start:start + 24]).backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        hits = sum((net(val_x[s:s + 24]).argmax(1) == val_y[s:s + 24]).sum().item() for s in (0, 24))
    print(epoch, hits / 48)
