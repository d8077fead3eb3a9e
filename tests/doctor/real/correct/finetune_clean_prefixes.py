"""Patterns: https://github.com/huggingface/pytorch-image-models (timm/models/_helpers.py, clean_state_dict:
strip 'module.' and '_orig_mod.' before loading) and the partial-load idiom of
https://discuss.pytorch.org/t/how-to-load-part-of-pre-trained-model/1113 (keep the checkpoint entries
whose names and shapes the model has, update the model's own dict, load that). Written here from scratch
(no code taken from either).

Practices exercised: a checkpoint saved from a DDP-wrapped, compiled model (keys 'module._orig_mod.*')
inside a {'state_dict': ...} dict, prefixes removed, a head of another size left out by the shape filter,
a strict load of the updated dict, then fine-tuning every layer with a fresh optimizer.
"""
import io

import torch
from torch import nn

WRAPPERS = ("module.", "_orig_mod.")


def without_wrappers(state):
    cleaned = {}
    for key, value in state.items():
        for prefix in WRAPPERS:
            key = key.removeprefix(prefix)
        cleaned[key] = value
    return cleaned


class Classifier(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 24), nn.ReLU())
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        return self.head(self.body(x))


torch.manual_seed(6)
source = Classifier(classes=50)
file = io.BytesIO()
torch.save({"state_dict": {f"module._orig_mod.{k}": v for k, v in source.state_dict().items()}, "epoch": 90}, file)
file.seek(0)

model = Classifier(classes=4)
saved = without_wrappers(torch.load(file, map_location="cpu", weights_only=True)["state_dict"])
own = model.state_dict()
usable = {k: v for k, v in saved.items() if k in own and v.shape == own[k].shape}
own.update(usable)
model.load_state_dict(own)
print(f"{len(usable)} of {len(own)} tensors came from the checkpoint")

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(48, 16), torch.randint(0, 4, (48,))
for _ in range(8):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print("loss", loss.item())
