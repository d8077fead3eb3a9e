"""Pattern: https://github.com/pytorch/examples (imagenet/main.py): the train / validate / checkpoint /
resume flow of that script, written here from scratch (no code taken from it).

Practices exercised: a running average of loss.item() weighted by batch size, top-k accuracy under
torch.no_grad() (an in-place mul_ on the count), model.eval() and torch.no_grad() for validation,
model.train() at the start of each epoch, a checkpoint dict holding the epoch, the model's and the
optimizer's state dicts and the best accuracy, and a resumed run that rebuilds both, loads them
(weights_only=True) and trains one more epoch. BatchNorm and ReLU(inplace=True) in the network.
"""
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Running:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, value, weight):
        self.total += value * weight
        self.count += weight

    @property
    def mean(self):
        return self.total / max(self.count, 1)


def top_k(logits, labels, k=1):
    with torch.no_grad():
        hits = (logits.topk(k, dim=1).indices == labels[:, None]).any(dim=1).float().sum()
        return hits.mul_(100.0 / labels.shape[0]).item()


def network():
    return nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Conv2d(12, 24, 3, padding=1), nn.BatchNorm2d(24), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))


def one_epoch(net, loader, loss_fn, opt):
    net.train()
    meter = Running()
    for x, y in loader:
        out = net(x)
        loss = loss_fn(out, y)
        meter.add(loss.item(), x.shape[0])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return meter.mean


def evaluate(net, loader):
    net.eval()
    accuracy = Running()
    with torch.no_grad():
        for x, y in loader:
            accuracy.add(top_k(net(x), y), x.shape[0])
    return accuracy.mean


torch.manual_seed(2)
x_all, y_all = torch.randn(80, 3, 16, 16), torch.randint(0, 10, (80,))
train_data = DataLoader(TensorDataset(x_all[:48], y_all[:48]), batch_size=12, shuffle=True)
val_data = DataLoader(TensorDataset(x_all[48:], y_all[48:]), batch_size=16)
loss_fn = nn.CrossEntropyLoss()
folder = tempfile.mkdtemp()
checkpoint_path = os.path.join(folder, "last.pt")

net = network()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
best = 0.0
for epoch in range(2):
    one_epoch(net, train_data, loss_fn, opt)
    best = max(best, evaluate(net, val_data))
    torch.save({"epoch": epoch + 1, "model": net.state_dict(), "optimizer": opt.state_dict(), "best": best},
               checkpoint_path)

# the resumed run: everything rebuilt, then restored from the file
net = network()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
state = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
net.load_state_dict(state["model"])
opt.load_state_dict(state["optimizer"])
for epoch in range(state["epoch"], state["epoch"] + 1):
    one_epoch(net, train_data, loss_fn, opt)
    print("resumed epoch", epoch, "accuracy", evaluate(net, val_data))
os.remove(checkpoint_path)
os.rmdir(folder)
