"""Mistake: a hand-written SGD update outside torch.no_grad().

Run: torchwork doctor examples/mistakes/inplace_leaf.py
"""
import torch

torch.manual_seed(0)
x = torch.randn(100, 3)
y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
w = torch.zeros(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1
for _ in range(5):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    w -= lr * w.grad  # doctor: inplace-leaf
    b -= lr * b.grad
    w.grad.zero_()
    b.grad.zero_()
