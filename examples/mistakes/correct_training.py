"""Correct: an idiomatic training script; the doctor finds nothing.

Seeded, shuffled DataLoader, Dropout + BatchNorm, zero_grad / backward / clip / step / scheduler,
validation done right (model.eval() + inference_mode, then model.train()), metrics with .item(),
a checkpoint saved and loaded back.
Run: torchwork doctor examples/mistakes/correct_training.py
"""
import io

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
digits = load_digits()
data = TensorDataset(torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target))
train, val = torch.utils.data.random_split(data, [1500, 297], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train, batch_size=64, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(0))
val_loader = DataLoader(val, batch_size=128)

model = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=3 * len(train_loader))
loss_fn = nn.CrossEntropyLoss()

for epoch in range(3):
    model.train()
    running = 0.0
    for xb, yb in train_loader:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        running += loss.item()
    model.eval()
    correct = 0
    with torch.inference_mode():
        for xb, yb in val_loader:
            correct += (model(xb).argmax(dim=1) == yb).sum().item()
    print(f"epoch {epoch}: train loss {running / len(train_loader):.3f}, val accuracy {correct / len(val):.3f}")

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10))
restored.load_state_dict(torch.load(buffer, weights_only=True))
restored.eval()
with torch.no_grad():
    sample = restored(data[0][0].unsqueeze(0))  # one sample, in eval mode: fine for BatchNorm
print("prediction for the first digit:", sample.argmax().item())
