"""Pattern: https://github.com/pytorch/examples (word_language_model/main.py clips gradients because "it
helps prevent the exploding gradient problem in RNNs"): a vanilla RNN whose recurrent weight matrix has a
spectral radius far above 1 grows its hidden state geometrically with the sequence length. Written here
from scratch: an nn.RNN with relu, its recurrent weights scaled up, 60 steps, no clipping and no
normalisation. The squared error at the head is inf at the first step because the hidden state already
holds values near 1e20, not because of the square: the culprit is the RNN's line.
"""
import torch
from torch import nn


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 32, nonlinearity="relu", batch_first=True)
        self.head = nn.Linear(32, 1)
        with torch.no_grad():
            self.rnn.weight_hh_l0.mul_(6.0)  # spectral radius far above 1

    def forward(self, x):
        out, _ = self.rnn(x)  # expect: non-finite-loss
        return self.head(out[:, -1])


torch.manual_seed(0)
model = Recurrent()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 60, 4), torch.randn(16, 1)
for step in range(3):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
