"""Source: https://github.com/IBM/aihwkit/issues/446 ("Missing zero_grad() call" in
examples/01_simple_layer.py): "When running on 10 iterations currently the loss decrease then increase
again". The example's loop (a single layer trained on two samples), with nn.Linear and torch.optim.SGD
standing in for aihwkit's AnalogLinear and AnalogSGD.
"""
import torch
from torch.nn import Linear
from torch.nn.functional import mse_loss
from torch.optim import SGD

torch.manual_seed(0)
x = torch.Tensor([[0.1, 0.2, 0.4, 0.3], [0.2, 0.1, 0.1, 0.3]])
y = torch.Tensor([[1.0, 0.5], [0.7, 0.3]])
model = Linear(4, 2)
opt = SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    pred = model(x)
    loss = mse_loss(pred, y)
    loss.backward()
    opt.step()  # expect: missing-zero-grad
    print("Loss error: {:.16f}".format(loss))
