"""Pattern: https://github.com/pytorch/examples (dcgan/main.py): the practices of its training loop,
written here from scratch (no code taken from it).

Practices exercised: a transposed-convolution generator with BatchNorm and a convolutional discriminator
with LeakyReLU(inplace=True) and a Sigmoid output scored by BCELoss; one label tensor refilled in place
(fill_) for real, fake and generator targets; the discriminator step on fake.detach() after clearing D's
gradients; the generator step scores the same fakes *without* detach (so D also receives gradients from
the generator's loss, cleared by D's zero_grad at the next iteration); and a periodic sample from fixed
noise in training mode every other iteration (never the last), as the example does before saving images.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(5)
LATENT, FEATURES, CHANNELS = 12, 8, 3


def up(cin, cout, first=False):
    return [nn.ConvTranspose2d(cin, cout, 4, 1 if first else 2, 0 if first else 1, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU(True)]


def down(cin, cout, norm=True):
    layers = [nn.Conv2d(cin, cout, 4, 2, 1, bias=False)]
    return layers + ([nn.BatchNorm2d(cout)] if norm else []) + [nn.LeakyReLU(0.2, inplace=True)]


generator = nn.Sequential(*up(LATENT, FEATURES * 4, first=True), *up(FEATURES * 4, FEATURES * 2),
                          *up(FEATURES * 2, FEATURES), nn.ConvTranspose2d(FEATURES, CHANNELS, 4, 2, 1, bias=False),
                          nn.Tanh())  # 1 -> 4 -> 8 -> 16 -> 32 pixels
discriminator = nn.Sequential(*down(CHANNELS, FEATURES, norm=False), *down(FEATURES, FEATURES * 2),
                              *down(FEATURES * 2, FEATURES * 4), nn.Conv2d(FEATURES * 4, 1, 4, 1, 0, bias=False),
                              nn.Sigmoid(), nn.Flatten(0))


def small_normal_init(module):
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


generator.apply(small_normal_init)
discriminator.apply(small_normal_init)
images = DataLoader(TensorDataset(torch.rand(32, CHANNELS, 32, 32) * 2 - 1), batch_size=8, shuffle=True)
bce = nn.BCELoss()
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
fixed_noise = torch.randn(8, LATENT, 1, 1)

for epoch in range(2):
    for i, (real,) in enumerate(images):
        n = real.shape[0]
        discriminator.zero_grad()
        target = torch.ones(n)
        loss_real = bce(discriminator(real), target)
        loss_real.backward()
        fakes = generator(torch.randn(n, LATENT, 1, 1))
        target.fill_(0.0)
        loss_fake = bce(discriminator(fakes.detach()), target)
        loss_fake.backward()
        opt_d.step()

        generator.zero_grad()
        target.fill_(1.0)  # the generator wants its fakes called real
        loss_g = bce(discriminator(fakes), target)
        loss_g.backward()
        opt_g.step()
        print(epoch, i, round((loss_real + loss_fake).item(), 3), round(loss_g.item(), 3))
        if i % 2 == 0:
            preview = generator(fixed_noise)  # what the example writes to disk as a grid of images
