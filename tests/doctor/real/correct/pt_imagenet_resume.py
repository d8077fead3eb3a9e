"""Source: pytorch/examples, imagenet/main.py (commit 493da9304e56ff5160f78d01a54992db35df2a98).

The ImageNet script's train/validate/save_checkpoint/--resume flow: AverageMeter of loss.item(),
top-k accuracy under torch.no_grad(), model.eval() for validation, a checkpoint dict with 'state_dict' and
'optimizer', and a resumed run that loads both. A small CNN on random 32x32 images replaces the torchvision
ResNet and ImageNet; the checkpoint goes to a temporary folder.
"""
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def make_model():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def train(train_loader, model, criterion, optimizer):
    losses, top1 = AverageMeter(), AverageMeter()
    model.train()
    for images, target in train_loader:
        output = model(images)
        loss = criterion(output, target)
        acc1, = accuracy(output, target, topk=(1,))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses.avg


def validate(val_loader, model, criterion):
    losses, top1 = AverageMeter(), AverageMeter()
    model.eval()
    with torch.no_grad():
        for images, target in val_loader:
            output = model(images)
            loss = criterion(output, target)
            acc1, = accuracy(output, target, topk=(1,))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0], images.size(0))
    return top1.avg


def save_checkpoint(state, filename):
    torch.save(state, filename)


torch.manual_seed(0)
images, labels = torch.randn(96, 3, 32, 32), torch.randint(0, 10, (96,))
train_loader = DataLoader(TensorDataset(images[:64], labels[:64]), batch_size=16, shuffle=True)
val_loader = DataLoader(TensorDataset(images[64:], labels[64:]), batch_size=32)
criterion = nn.CrossEntropyLoss()
folder = tempfile.mkdtemp()
path = os.path.join(folder, "checkpoint.pth.tar")

model = make_model()
optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
for epoch in range(2):
    train(train_loader, model, criterion, optimizer)
    acc1 = validate(val_loader, model, criterion)
    save_checkpoint({'epoch': epoch + 1, 'arch': 'smallcnn', 'state_dict': model.state_dict(), 'best_acc1': acc1,
                     'optimizer': optimizer.state_dict()}, path)

# --resume: a new process would build the model again and continue from the checkpoint
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
checkpoint = torch.load(path, map_location="cpu", weights_only=True)
start_epoch = checkpoint['epoch']
model.load_state_dict(checkpoint['state_dict'])
optimizer.load_state_dict(checkpoint['optimizer'])
print(f"=> loaded checkpoint '{path}' (epoch {start_epoch})")
for epoch in range(start_epoch, start_epoch + 1):
    train(train_loader, model, criterion, optimizer)
    print("val acc", float(validate(val_loader, model, criterion)))
os.remove(path)
os.rmdir(folder)
