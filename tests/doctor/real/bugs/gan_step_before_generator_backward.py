"""Pattern: https://github.com/leftthomas/SRGAN/issues/89 (with PyTorch >= 1.5: "one of the variables needed
for gradient computation has been modified by an inplace operation": the discriminator loss is
backpropagated with retain_graph=True, the discriminator's optimizer steps, then the generator's loss
reuses the discriminator's output from before that step). Written here from scratch with tiny networks.
The culprit is the discriminator's step; the error surfaces at the generator's backward.
"""
import torch
from torch import nn

torch.manual_seed(9)
gen = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.PReLU(), nn.Conv2d(6, 3, 3, padding=1), nn.Tanh())
disc = nn.Sequential(nn.Conv2d(3, 6, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1),
                     nn.Flatten(), nn.Linear(6, 1), nn.Sigmoid())
opt_gen, opt_disc = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
for _ in range(2):
    high, low = torch.rand(2, 3, 12, 12), torch.rand(2, 3, 12, 12)
    restored = gen(low)
    disc.zero_grad()
    score_real, score_fake = disc(high).mean(), disc(restored).mean()
    (1 - score_real + score_fake).backward(retain_graph=True)
    opt_disc.step()  # expect: inplace-saved
    gen.zero_grad()
    gen_loss = nn.functional.mse_loss(restored, high) + 1e-3 * (1 - score_fake)
    gen_loss.backward()
    opt_gen.step()
