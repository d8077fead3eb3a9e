"""Source: https://github.com/leftthomas/SRGAN/issues/89 (train.py of leftthomas/SRGAN, reported with
PyTorch >= 1.5): "one of the variables needed for gradient computation has been modified by an inplace
operation ... [torch.cuda.FloatTensor [1, 1024, 1, 1]] is at version 2; expected version 1 instead".

The loop from the repository's train.py: the discriminator's loss is backpropagated with
retain_graph=True and optimizerD.step() runs, then the generator's loss is computed from fake_out, whose
graph saved the discriminator's weights before that step. Tiny networks and random images.
The culprit is optimizerD.step(); the error surfaces at g_loss.backward().
"""
import torch
from torch import nn, optim

torch.manual_seed(0)
netG = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PReLU(), nn.Conv2d(8, 3, 3, padding=1), nn.Tanh())
netD = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1),
                     nn.Conv2d(8, 16, 1), nn.LeakyReLU(0.2), nn.Conv2d(16, 1, 1), nn.Sigmoid())
optimizerG = optim.Adam(netG.parameters())
optimizerD = optim.Adam(netD.parameters())
mse = nn.MSELoss()


def generator_criterion(out_labels, out_images, target_images):
    adversarial_loss = torch.mean(1 - out_labels)
    image_loss = mse(out_images, target_images)
    return image_loss + 0.001 * adversarial_loss


for _ in range(2):
    target, data = torch.rand(4, 3, 16, 16), torch.rand(4, 3, 16, 16)
    ############################
    # (1) Update D network: maximize D(x)-1-D(G(z))
    ###########################
    fake_img = netG(data)
    netD.zero_grad()
    real_out = netD(target).mean()
    fake_out = netD(fake_img).mean()
    d_loss = 1 - real_out + fake_out
    d_loss.backward(retain_graph=True)
    optimizerD.step()  # expect: inplace-saved
    ############################
    # (2) Update G network: minimize 1-D(G(z)) + Perception Loss + Image Loss + TV Loss
    ###########################
    netG.zero_grad()
    g_loss = generator_criterion(fake_out, fake_img, target)
    g_loss.backward()
    optimizerG.step()
