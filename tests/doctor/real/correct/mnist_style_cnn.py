"""Pattern: https://github.com/pytorch/examples (mnist/main.py): the structure of that example, written
here from scratch (no code taken from it).

Practices exercised: a two-convolution network with two Dropout layers and log_softmax output trained
with nll_loss, Adadelta with a StepLR stepped once per epoch, argparse settings with defaults, separate
train and test functions (model.train() / model.eval() + torch.no_grad(), test loss summed with
reduction='sum' and .item()), and main() behind `if __name__ == '__main__'`. Random 28x28 images.
"""
import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Digits(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten())
        self.classify = nn.Sequential(nn.Linear(32 * 12 * 12, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 10))

    def forward(self, x):
        return F.log_softmax(self.classify(self.features(x)), dim=1)


def train(model, loader, optimizer, epoch, every):
    model.train()
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if i % every == 0:
            print(f"epoch {epoch} batch {i}: {loss.item():.4f}")


def test(model, loader):
    model.eval()
    total, right = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            log_probs = model(x)
            total += F.nll_loss(log_probs, y, reduction="sum").item()
            right += (log_probs.argmax(1) == y).sum().item()
    print(f"test loss {total / len(loader.dataset):.4f}, accuracy {right}/{len(loader.dataset)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--log-every", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(4)
    x, y = torch.randn(80, 1, 28, 28), torch.randint(0, 10, (80,))
    train_loader = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=16, shuffle=True)
    test_loader = DataLoader(TensorDataset(x[48:], y[48:]), batch_size=32)
    model = Digits()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(model, train_loader, optimizer, epoch, args.log_every)
        test(model, test_loader)
        schedule.step()


if __name__ == "__main__":
    main()
