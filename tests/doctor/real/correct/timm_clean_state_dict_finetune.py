"""Sources: huggingface/pytorch-image-models, timm/models/_helpers.py (commit 2e74c68649d066d8a21ea92fdbebdc069b6c9205):
clean_state_dict strips 'module.' and then '_orig_mod.' before loading; and the partial-load idiom of
https://discuss.pytorch.org/t/how-to-load-part-of-pre-trained-model/1113 (filter the checkpoint to the
model's keys and shapes, update the model's own dict, load it), done after the keys were cleaned.

A backbone trained under DDP + torch.compile (keys 'module._orig_mod.*') is fine-tuned with a new head.
"""
import io
from collections import OrderedDict

import torch
import torch.nn as nn


def clean_state_dict(state_dict):
    # 'clean' checkpoint by removing .module prefix from state dict if it exists from parallel training
    cleaned_state_dict = OrderedDict()
    to_remove = ('module.', '_orig_mod.')
    for k, v in state_dict.items():
        for r in to_remove:
            k = k[len(r):] if k.startswith(r) else k
        cleaned_state_dict[k] = v
    return cleaned_state_dict


def make(num_classes):
    return nn.Sequential(OrderedDict(backbone=nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32)),
                                     act=nn.ReLU(), head=nn.Linear(32, num_classes)))


torch.manual_seed(0)
pretrained = make(num_classes=100)
buffer = io.BytesIO()
torch.save({"state_dict": {f"module._orig_mod.{k}": v for k, v in pretrained.state_dict().items()}}, buffer)
buffer.seek(0)

model = make(num_classes=5)
checkpoint = torch.load(buffer, map_location="cpu", weights_only=True)
pretrained_dict = clean_state_dict(checkpoint["state_dict"])
model_dict = model.state_dict()
# 1. filter out unnecessary keys (and the head, whose shape differs)
pretrained_dict = {k: v for k, v in pretrained_dict.items() if k in model_dict and v.shape == model_dict[k].shape}
# 2. overwrite entries in the existing state dict
model_dict.update(pretrained_dict)
# 3. load the new state dict
model.load_state_dict(model_dict)
print(f"loaded {len(pretrained_dict)} of {len(model_dict)} tensors")

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 20), torch.randint(0, 5, (64,))
for _ in range(10):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print("loss", loss.item())
