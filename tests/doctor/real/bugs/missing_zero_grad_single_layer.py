"""Pattern: https://github.com/IBM/aihwkit/issues/446 ("Missing zero_grad() call" in an example that trains
one layer on two samples: the loss goes down, then up again). Written here from scratch: a plain
nn.Linear and SGD, the loop without zero_grad().
"""
import torch
from torch import nn

torch.manual_seed(3)
inputs = torch.tensor([[0.3, 0.1, 0.5, 0.2], [0.1, 0.4, 0.2, 0.3]])
wanted = torch.tensor([[0.9, 0.4], [0.6, 0.2]])
layer = nn.Linear(4, 2)
sgd = torch.optim.SGD(layer.parameters(), lr=0.1)
for epoch in range(8):
    loss = nn.functional.mse_loss(layer(inputs), wanted)
    loss.backward()
    sgd.step()  # expect: missing-zero-grad
    print(epoch, loss.item())
