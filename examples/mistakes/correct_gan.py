"""Correct: a small GAN: two optimizers, detached fakes for the discriminator, no_grad sampling; no finding.

Run: torchwork doctor examples/mistakes/correct_gan.py
"""
import torch
from torch import nn

torch.manual_seed(0)
real_data = torch.randn(512, 2) * 0.5 + torch.tensor([2.0, -1.0])
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Dropout(0.1), nn.Linear(32, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()

for _ in range(30):
    real = real_data[torch.randint(0, 512, (64,))]
    fake = generator(torch.randn(64, 4))
    # discriminator step: the fakes are detached so the generator is not updated here
    opt_d.zero_grad()
    d_loss = bce(discriminator(real), torch.ones(64, 1)) + bce(discriminator(fake.detach()), torch.zeros(64, 1))
    d_loss.backward()
    opt_d.step()
    # generator step through the discriminator
    opt_g.zero_grad()
    g_loss = bce(discriminator(fake), torch.ones(64, 1))
    g_loss.backward()
    opt_g.step()

generator.eval()
with torch.no_grad():
    samples = generator(torch.randn(256, 4))
print(f"sample mean {samples.mean(0).tolist()}")
