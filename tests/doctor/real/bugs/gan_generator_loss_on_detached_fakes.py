"""Pattern: https://github.com/pytorch/examples (dcgan/main.py detaches the fakes for the discriminator's
step only): here the generator's loss is computed on D(G(z).detach()) too, so no gradient reaches the
generator and its optimizer steps on nothing; the discriminator's detach is right and must not be blamed. Written here from scratch with small MLPs on 2-D points.
"""
import torch
from torch import nn

torch.manual_seed(14)
real_points = torch.randn(256, 2) * 0.3 + torch.tensor([1.0, -1.0])
gen = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2))
disc = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt_gen = torch.optim.Adam(gen.parameters(), lr=1e-3)
opt_disc = torch.optim.Adam(disc.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(20):
    real = real_points[torch.randint(0, 256, (32,))]
    fake = gen(torch.randn(32, 3))
    opt_disc.zero_grad()
    d_loss = bce(disc(real), torch.ones(32, 1)) + bce(disc(fake.detach()), torch.zeros(32, 1))
    d_loss.backward()
    opt_disc.step()
    opt_gen.zero_grad()
    g_loss = bce(disc(fake.detach()), torch.ones(32, 1))  # expect: broken-graph
    g_loss.backward()
    opt_gen.step()
