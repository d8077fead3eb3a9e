"""Mistake: a schedule written in epochs (StepLR, step_size=1, as pytorch/examples' MNIST uses it) is
stepped after every batch: the learning rate is cut 0.7x per batch and training stalls in the first epoch.

Run: torchwork doctor examples/mistakes/scheduler_per_batch.py
"""
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
digits = load_digits()
data = TensorDataset(torch.tensor(digits.data[:512] / 16.0, dtype=torch.float32), torch.tensor(digits.target[:512]))
loader = DataLoader(data, batch_size=32, shuffle=True)

model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()  # doctor: scheduler-per-batch
    print(f"epoch {epoch}: loss {loss.item():.3f}, lr {scheduler.get_last_lr()[0]:.2e}")
