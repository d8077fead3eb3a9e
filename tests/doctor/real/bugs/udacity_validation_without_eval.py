"""Source: https://github.com/udacity/deep-learning-v2-pytorch/issues/3 (mnist_mlp_solution_with_validation
and cifar10_cnn_augmentation notebooks): "We have dropout in the model ... why don't we use model.eval() for
the validation and test time". The notebook's MLP with dropout 0.2, trained and validated each epoch with
no model.eval() before the validation loop. Random 28x28 images stand in for MNIST.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        x = x.view(-1, 28 * 28)
        x = self.dropout(F.relu(self.fc1(x)))
        x = self.dropout(F.relu(self.fc2(x)))
        return self.fc3(x)


images, labels = torch.randn(160, 1, 28, 28), torch.randint(0, 10, (160,))
train_loader = DataLoader(TensorDataset(images[:128], labels[:128]), batch_size=20)
valid_loader = DataLoader(TensorDataset(images[128:], labels[128:]), batch_size=16)
model = Net()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    train_loss, valid_loss = 0.0, 0.0
    for data, target in train_loader:
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        train_loss += loss.item() * data.size(0)
    for data, target in valid_loader:
        output = model(data)  # expect: eval-mode
        loss = criterion(output, target)
        valid_loss += loss.item() * data.size(0)
    print('Epoch: {} \tTraining Loss: {:.6f} \tValidation Loss: {:.6f}'.format(
        epoch + 1, train_loss / len(train_loader.sampler), valid_loss / len(valid_loader.sampler)))
