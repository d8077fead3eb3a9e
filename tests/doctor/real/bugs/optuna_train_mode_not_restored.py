"""Source: https://github.com/optuna/optuna/pull/1725 ("model.train() should be called every epoch before
training, because the model.eval() below has changed to mode of the model"), examples/pytorch_simple.py of
optuna/optuna: model.train() ran once before the epoch loop, the validation inside the loop called
model.eval(), so every epoch after the first trained with dropout off. The example's define_model (Linear,
ReLU, Dropout layers) on random 28x28 inputs.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
layers = []
in_features = 28 * 28
for out_features, p in ((64, 0.3), (32, 0.2)):
    layers.append(nn.Linear(in_features, out_features))
    layers.append(nn.ReLU())
    layers.append(nn.Dropout(p))
    in_features = out_features
layers.append(nn.Linear(in_features, 10))
layers.append(nn.LogSoftmax(dim=1))
model = nn.Sequential(*layers)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train_x, train_y = torch.randn(128, 28 * 28), torch.randint(0, 10, (128,))
valid_x, valid_y = torch.randn(64, 28 * 28), torch.randint(0, 10, (64,))

model.train()
for epoch in range(3):
    for batch_idx in range(0, 128, 32):
        data, target = train_x[batch_idx:batch_idx + 32], train_y[batch_idx:batch_idx + 32]
        optimizer.zero_grad()
        output = model(data)  # expect: train-mode
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
    # Validation of the model.
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch_idx in range(0, 64, 32):
            output = model(valid_x[batch_idx:batch_idx + 32])
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(valid_y[batch_idx:batch_idx + 32].view_as(pred)).sum().item()
    accuracy = correct / 64
