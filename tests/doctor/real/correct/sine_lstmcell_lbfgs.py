"""Pattern: https://github.com/pytorch/examples (time_sequence_prediction/train.py): sine-wave prediction
with LSTM cells and L-BFGS, written here from scratch (no code taken from it).

Practices exercised: two stacked LSTMCells unrolled by hand over time in double precision (model.double()),
an L-BFGS optimizer whose closure zeroes the gradients, runs forward and backward and returns the loss
(called several times inside one step), and predictions of future steps that feed the model's own output
back in, under torch.no_grad(), with the result turned into NumPy through .detach().numpy().
"""
import numpy as np
import torch
from torch import nn

rng = np.random.default_rng(2)
waves = np.sin((np.arange(60)[None, :] + rng.integers(-60, 60, (12, 1))) / 15.0)


class Predictor(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.hidden = hidden
        self.first, self.second = nn.LSTMCell(1, hidden), nn.LSTMCell(hidden, hidden)
        self.read = nn.Linear(hidden, 1)

    def forward(self, series, extra=0):
        state1 = state2 = None
        outputs = []
        steps = list(series.split(1, dim=1))
        for t in range(len(steps) + extra):
            value = steps[t] if t < len(steps) else outputs[-1]
            state1 = self.first(value, state1)
            state2 = self.second(state1[0], state2)
            outputs.append(self.read(state2[0]))
        return torch.cat(outputs, dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    series = torch.from_numpy(waves)
    train_in, train_out = series[2:, :-1], series[2:, 1:]
    test_in, test_out = series[:2, :-1], series[:2, 1:]
    model = Predictor().double()
    mse = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=4)

    def closure():
        optimizer.zero_grad()
        loss = mse(model(train_in), train_out)
        loss.backward()
        return loss

    for step in range(2):
        print("train loss", optimizer.step(closure).item())
        with torch.no_grad():
            ahead = 10
            forecast = model(test_in, extra=ahead)
            print("test loss", mse(forecast[:, :-ahead], test_out).item())
            curve = forecast.detach().numpy()
