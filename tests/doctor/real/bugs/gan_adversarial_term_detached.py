"""Pattern: https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix (models/pix2pix_model.py: the
discriminator scores fake.detach() for its own step, the generator's loss scores the fake *without*
detach and adds an L1 term). Written here from scratch with the generator's adversarial term computed on
a detached fake: the L1 term still trains the generator, so nothing crashes and no parameter is left
without a gradient, but the adversarial term sends the generator nothing.
"""
import torch
from torch import nn

torch.manual_seed(16)
gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 4))
disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt_gen = torch.optim.Adam(gen.parameters(), lr=1e-3)
opt_disc = torch.optim.Adam(disc.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(10):
    source, target = torch.randn(16, 4), torch.randn(16, 4)
    fake = gen(source)
    opt_disc.zero_grad()
    d_real = bce(disc(torch.cat([source, target], 1)), torch.ones(16, 1))
    d_fake = bce(disc(torch.cat([source, fake.detach()], 1)), torch.zeros(16, 1))
    ((d_real + d_fake) / 2).backward()
    opt_disc.step()
    opt_gen.zero_grad()
    pair = torch.cat([source, fake.detach()], 1)  # expect: broken-graph
    g_loss = bce(disc(pair), torch.ones(16, 1)) + 10 * nn.functional.l1_loss(fake, target)
    g_loss.backward()
    opt_gen.step()
