"""Pattern: https://github.com/karpathy/nanoGPT (model.py, train.py): the practices of its training script,
written here from scratch for the doctor's corpus (no code taken from it).

Practices exercised: a LayerNorm without bias (F.layer_norm with weight only), attention through
scaled_dot_product_attention with dropout only while training, weight tying between the token embedding
and the output head, a scaled init for the residual projections, weight decay only for tensors of rank
>= 2, a loss estimate under @torch.no_grad() between model.eval() and model.train(), a warmup + cosine
learning rate written into param_groups, gradient accumulation over micro-steps through a GradScaler
(disabled in float32), unscale_ before clipping, zero_grad(set_to_none=True) after the step, the next
batch fetched before backward, and a checkpoint dict of state dicts.
"""
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, CONTEXT, WIDTH, HEADS, DEPTH, P_DROP = 40, 16, 24, 3, 2, 0.1


class WeightOnlyNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.gain, None, 1e-5)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm_a, self.norm_b = WeightOnlyNorm(WIDTH), WeightOnlyNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.attn_out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.ff_in = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.ff_out = nn.Linear(4 * WIDTH, WIDTH, bias=False)
        self.drop = nn.Dropout(P_DROP)

    def attend(self, x):
        batch, steps, _ = x.shape
        heads = self.qkv(x).view(batch, steps, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        mixed = F.scaled_dot_product_attention(heads[0], heads[1], heads[2], is_causal=True,
                                               dropout_p=P_DROP if self.training else 0.0)
        return self.drop(self.attn_out(mixed.transpose(1, 2).reshape(batch, steps, WIDTH)))

    def forward(self, x):
        x = x + self.attend(self.norm_a(x))
        return x + self.drop(self.ff_out(F.gelu(self.ff_in(self.norm_b(x)))))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(CONTEXT, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(DEPTH))
        self.norm = WeightOnlyNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.tokens.weight = self.head.weight  # one matrix reads and writes tokens
        for name, param in self.named_parameters():
            if param.dim() >= 2:
                std = 0.02 / math.sqrt(2 * DEPTH) if name.endswith(("attn_out.weight", "ff_out.weight")) else 0.02
                nn.init.normal_(param, 0.0, std)

    def forward(self, idx, targets=None):
        h = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            h = layer(h)
        logits = self.head(self.norm(h))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


torch.manual_seed(7)
corpus = {"train": np.random.default_rng(3).integers(0, VOCAB, 4000).astype(np.uint16),
          "val": np.random.default_rng(4).integers(0, VOCAB, 800).astype(np.uint16)}


def batch_of(split, size=4):
    source = corpus[split]
    starts = torch.randint(len(source) - CONTEXT - 1, (size,)).tolist()
    x = torch.stack([torch.from_numpy(source[s:s + CONTEXT].astype(np.int64)) for s in starts])
    y = torch.stack([torch.from_numpy(source[s + 1:s + 1 + CONTEXT].astype(np.int64)) for s in starts])
    return x, y


model = TinyGPT()
matrices = [p for p in model.parameters() if p.dim() >= 2]
vectors = [p for p in model.parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
                              lr=1e-3, betas=(0.9, 0.95))
scaler = torch.amp.GradScaler("cpu", enabled=False)  # float32 here: the scaler passes everything through
peak, floor, warmup, total, micro_steps = 1e-3, 1e-4, 4, 18, 3


@torch.no_grad()
def mean_losses(batches=2):
    model.eval()
    result = {split: sum(model(*batch_of(split))[1].item() for _ in range(batches)) / batches
              for split in ("train", "val")}
    model.train()
    return result


def rate(step):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    return floor + 0.5 * (1 + math.cos(math.pi * progress)) * (peak - floor)


x, y = batch_of("train")
saved = None
for step in range(total):
    for group in optimizer.param_groups:
        group["lr"] = rate(step)
    if step % 8 == 0:
        losses = mean_losses()
        print(f"step {step}: {losses}")
        saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                 "val": losses["val"]}
    for _ in range(micro_steps):
        _, loss = model(x, y)
        x, y = batch_of("train")  # the next batch is ready before backward starts
        scaler.scale(loss / micro_steps).backward()
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
print("saved at step", saved["step"])
