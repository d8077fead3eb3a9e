"""Pattern: https://github.com/openvinotoolkit/nncf/pull/379 (a data set whose size leaves a last batch of
one sample: "Expected more than 1 value per channel when training" from BatchNorm at the end of an
epoch; fixed with drop_last=True). Written here from scratch: 13 samples in batches of 4, a small CNN
with BatchNorm2d and a BatchNorm1d in its classifier.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.fc, self.fc_norm, self.out = nn.Linear(6, 12), nn.BatchNorm1d(12), nn.Linear(12, 4)

    def forward(self, x):
        x = torch.relu(self.norm(self.conv(x)))
        x = x.mean(dim=(2, 3))
        return self.out(torch.relu(self.fc_norm(self.fc(x))))


torch.manual_seed(5)
loader = DataLoader(TensorDataset(torch.randn(13, 3, 6, 6), torch.randint(0, 4, (13,))),  # expect: batchnorm-single-sample
                    batch_size=4, shuffle=True)
net = SmallCNN()
opt = torch.optim.SGD(net.parameters(), lr=0.05)
for x, y in loader:
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
