"""Pattern: https://github.com/karpathy/minGPT (mingpt/model.py, mingpt/trainer.py, projects/adder): the
practices of its GPT and trainer, written here from scratch (no code taken from it).

Practices exercised: a causal mask registered as a buffer and applied with masked_fill(-inf) before the
softmax, a hand-written tanh GELU using torch.pow(x, 3), weight decay chosen by module type (Linear
weights decay; biases, LayerNorm and Embedding weights do not), an MLP called through a lambda over a
ModuleDict, a DataLoader drawing with replacement from a RandomSampler of huge length, zero_grad on the
model (set_to_none=True) between forward and backward, clip_grad_norm_, and an addition data set whose
prompt positions are masked out of the loss with target -1.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler


def tanh_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MaskedAttention(nn.Module):
    def __init__(self, width, heads, length):
        super().__init__()
        self.heads = heads
        self.project_in, self.project_out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("allowed", torch.ones(length, length).tril().bool())

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (part.reshape(b, t, self.heads, -1).transpose(1, 2) for part in self.project_in(x).chunk(3, -1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])
        scores = scores.masked_fill(~self.allowed[:t, :t], float("-inf"))
        mixed = self.drop(scores.softmax(-1)) @ v
        return self.project_out(mixed.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads, length):
        super().__init__()
        self.pre_attn, self.pre_mlp = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = MaskedAttention(width, heads, length)
        self.mlp = nn.ModuleDict({"up": nn.Linear(width, 4 * width), "down": nn.Linear(4 * width, width)})
        parts = self.mlp
        self.run_mlp = lambda h: parts["down"](tanh_gelu(parts["up"](h)))

    def forward(self, x):
        x = x + self.attn(self.pre_attn(x))
        return x + self.run_mlp(self.pre_mlp(x))


class Adder(nn.Module):
    def __init__(self, vocab=10, length=6, width=32, heads=4, depth=2):
        super().__init__()
        self.embed, self.where = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.Sequential(*[Block(width, heads, length) for _ in range(depth)])
        self.final = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)

    def forward(self, idx, targets):
        h = self.embed(idx) + self.where(torch.arange(idx.shape[1])[None])
        logits = self.out(self.final(self.blocks(h)))
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)

    def optimizer(self, lr, decay):
        decayed, plain = [], []
        for module in self.modules():
            for name, param in module.named_parameters(recurse=False):
                (decayed if isinstance(module, nn.Linear) and name == "weight" else plain).append(param)
        return torch.optim.AdamW([{"params": decayed, "weight_decay": decay}, {"params": plain, "weight_decay": 0.0}],
                                 lr=lr, betas=(0.9, 0.95))


class TwoDigitSums(Dataset):
    """a, b < 100; the sequence is a's and b's digits, then the sum's three digits reversed."""

    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        a, b = divmod(index, 100)
        digits = [int(d) for d in f"{a:02d}{b:02d}{a + b:03d}"[:4] + f"{a + b:03d}"[::-1]]
        x, y = torch.tensor(digits[:-1]), torch.tensor(digits[1:])
        y[:3] = -1  # no loss on predicting the operands
        return x, y


torch.manual_seed(11)
data = TwoDigitSums()
model = Adder()
optimizer = model.optimizer(5e-4, 0.1)
loader = DataLoader(data, batch_size=32, sampler=RandomSampler(data, replacement=True, num_samples=10**9))
batches = iter(loader)
model.train()
for it in range(30):
    x, y = next(batches)
    _, loss = model(x, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if it % 10 == 0:
        print(it, round(loss.item(), 4))
