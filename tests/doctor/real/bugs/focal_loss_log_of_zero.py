"""Source: https://github.com/mathiaszinnen/focal_loss_torch/issues/3 ("Numerical issues with
torch.log(p_t)": "the logarithm of 0 is not defined"), focal_loss/focal_loss.py of mathiaszinnen/focal_loss_torch.

The FocalLoss forward on softmax probabilities: p_t is gathered for the target class and
fl = -1 * (1 - p_t) ** gamma * torch.log(p_t). Confident wrong predictions make p_t exactly 0 in float32,
so the loss is inf and the gradients NaN. A linear classifier on large-valued random features.
"""
import torch
from torch import nn


class FocalLoss(nn.Module):
    def __init__(self, gamma, reduction='mean'):
        super().__init__()
        self.gamma = gamma
        self.reduction = reduction

    def forward(self, x, target):
        # x: probabilities (after softmax), target: class indices
        p_t = x[torch.arange(x.shape[0]), target]
        fl = -1 * (1 - p_t) ** self.gamma * torch.log(p_t)  # expect: non-finite-loss
        return fl.mean() if self.reduction == 'mean' else fl.sum()


torch.manual_seed(0)
model = nn.Linear(16, 4)
criterion = FocalLoss(gamma=2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 16) * 60, torch.randint(0, 4, (32,))
for step in range(3):
    optimizer.zero_grad()
    probs = torch.softmax(model(x), dim=1)
    loss = criterion(probs, y)
    loss.backward()
    optimizer.step()
    print(step, loss.item())
