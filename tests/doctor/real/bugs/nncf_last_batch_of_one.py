"""Source: https://github.com/openvinotoolkit/nncf/pull/379 ("Dropped last data point in all DataLoaders to
prevent issue with BN"): "There're 333 data points with batch_size=3 and the last one with batch_size=1.
Training may fail in the end of epoch" with "ValueError: Expected more than 1 value per channel when
training". Ten samples with batch_size=3 give the same short last batch; a small CNN whose classifier has
a BatchNorm1d (the layer that raises).
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(8, 16)
        self.bn2 = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv(x)))  # expect: batchnorm-single-sample
        x = self.pool(x).flatten(1)
        x = torch.relu(self.bn2(self.fc1(x)))
        return self.fc2(x)


torch.manual_seed(0)
train_loader = DataLoader(TensorDataset(torch.randn(10, 3, 8, 8), torch.randint(0, 10, (10,))), batch_size=3,
                          shuffle=True)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
for images, target in train_loader:
    optimizer.zero_grad()
    loss = criterion(model(images), target)
    loss.backward()
    optimizer.step()
