"""Mistake: validation without model.eval() in a model whose only dropout is functional.

The model has no nn.Dropout layer: `F.dropout(h, p, training=self.training)` drops because the model is
still in training mode during the validation loop.
Run: torchwork doctor examples/mistakes/eval_mode_functional.py
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.dropout(torch.relu(self.fc1(x)), 0.3, training=self.training))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_x, train_y = torch.randn(256, 16), torch.randint(0, 3, (256,))
val_x, val_y = torch.randn(96, 16), torch.randint(0, 3, (96,))
for epoch in range(2):
    for i in range(0, 256, 32):
        optimizer.zero_grad()
        F.cross_entropy(model(train_x[i:i + 32]), train_y[i:i + 32]).backward()
        optimizer.step()
    with torch.no_grad():  # model.eval() is missing
        correct = sum((model(val_x[i:i + 32]).argmax(1) == val_y[i:i + 32]).sum().item()  # doctor: eval-mode
                      for i in range(0, 96, 32))
    print(f"epoch {epoch}: val accuracy {correct / 96:.3f}")
