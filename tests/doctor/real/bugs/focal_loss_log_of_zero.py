"""Pattern: https://github.com/mathiaszinnen/focal_loss_torch/issues/3 ("Numerical issues with
torch.log(p_t)": a focal loss on softmax probabilities takes the log of a probability that underflows to
exactly 0 for a confident wrong prediction). Written here from scratch: a focal loss module and a linear
classifier on large-valued features.
"""
import torch
from torch import nn


class Focal(nn.Module):
    def __init__(self, gamma=2.0):
        super().__init__()
        self.gamma = gamma

    def forward(self, probs, labels):
        p_true = probs.gather(1, labels[:, None]).squeeze(1)
        return (-(1 - p_true).pow(self.gamma) * torch.log(p_true)).mean()  # expect: non-finite-loss


torch.manual_seed(1)
classifier = nn.Linear(16, 4)
focal = Focal()
opt = torch.optim.SGD(classifier.parameters(), lr=0.01)
features, labels = torch.randn(32, 16) * 60, torch.randint(0, 4, (32,))
for step in range(3):
    opt.zero_grad()
    loss = focal(classifier(features).softmax(dim=1), labels)
    loss.backward()
    opt.step()
    print(step, loss.item())
