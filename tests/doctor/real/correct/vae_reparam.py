"""Pattern: https://github.com/pytorch/examples (vae/main.py): a variational autoencoder as that example
trains it, written here from scratch (no code taken from it).

Practices exercised: encode to a mean and a log-variance, the reparameterisation trick with randn_like,
a sigmoid decoder, a summed binary cross-entropy plus the KL term, model.train() for training and
model.eval() + torch.no_grad() for the test loss, and new images sampled by calling the decoder method
directly (not forward) under torch.no_grad() after each epoch. Random [0, 1) images stand in for MNIST.
"""
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self, pixels=196, hidden=64, code=8):
        super().__init__()
        self.pixels = pixels
        self.enc, self.mu, self.logvar = nn.Linear(pixels, hidden), nn.Linear(hidden, code), nn.Linear(hidden, code)
        self.dec1, self.dec2 = nn.Linear(code, hidden), nn.Linear(hidden, pixels)

    def encode(self, x):
        h = F.relu(self.enc(x))
        return self.mu(h), self.logvar(h)

    def decode(self, z):
        return torch.sigmoid(self.dec2(F.relu(self.dec1(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.flatten(1))
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


def elbo_loss(recon, x, mu, logvar):
    reconstruction = F.binary_cross_entropy(recon, x.flatten(1), reduction="sum")
    return reconstruction - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


torch.manual_seed(9)
images = torch.rand(96, 1, 14, 14)
train_loader = DataLoader(TensorDataset(images[:64]), batch_size=16, shuffle=True)
test_loader = DataLoader(TensorDataset(images[64:]), batch_size=16)
model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    model.train()
    total = 0.0
    for (x,) in train_loader:
        optimizer.zero_grad()
        recon, mu, logvar = model(x)
        loss = elbo_loss(recon, x, mu, logvar)
        loss.backward()
        total += loss.item()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        test_total = 0.0
        for (x,) in test_loader:
            recon, mu, logvar = model(x)
            test_total += elbo_loss(recon, x, mu, logvar).item()
        samples = model.decode(torch.randn(16, 8))
    print(epoch, total / 64, test_total / 32)
