"""Pattern: https://github.com/XuJiacong/PIDNet/issues/30 ("load 0 parameters": the loader keeps only the
checkpoint entries whose names and shapes the model has, but the checkpoint came from a training wrapper
whose keys all start with 'model.', so nothing is kept and strict=False loads nothing). Written here from
scratch: a small segmentation net, its wrapper, and the filtering loader.
"""
import io

import torch
from torch import nn


def segmentation_net():
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 5, 1))


class WithLoss(nn.Module):  # the training wrapper: its keys are 'model.<name>'
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss()


torch.manual_seed(7)
file = io.BytesIO()
torch.save({"state_dict": WithLoss(segmentation_net()).state_dict(), "epoch": 120}, file)
file.seek(0)
net = segmentation_net()
saved = torch.load(file, map_location="cpu", weights_only=True)["state_dict"]
mine = net.state_dict()
kept = {k: v for k, v in saved.items() if k in mine and v.shape == mine[k].shape}
mine.update(kept)
print(f"kept {len(kept)} tensors")
net.load_state_dict(mine, strict=False)  # expect: state-dict-mismatch
