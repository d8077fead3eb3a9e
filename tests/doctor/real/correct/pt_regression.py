"""Source: pytorch/examples, regression/main.py (commit d034f9d4cc2faa12151035259e580971e8c0afc2).

Polynomial regression with a hand-written SGD update through `.data`, as in the example; the loss is read
with .item() (what `output.data[0]` became after PyTorch 0.4) and the loop is capped at 300 batches.
"""
from itertools import count

import torch
import torch.nn.functional as F

torch.manual_seed(0)
POLY_DEGREE = 4
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def get_batch(batch_size=32):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


# Define model
fc = torch.nn.Linear(W_target.size(0), 1)

for batch_idx in count(1):
    # Get data
    batch_x, batch_y = get_batch()
    # Reset gradients
    fc.zero_grad()
    # Forward pass
    output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()
    # Backward pass
    output.backward()
    # Apply gradients
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    # Stop criterion
    if loss < 1e-3 or batch_idx >= 300:
        break

print('Loss: {:.6f} after {} batches'.format(loss, batch_idx))
