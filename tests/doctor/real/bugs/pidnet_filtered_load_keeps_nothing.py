"""Source: https://github.com/XuJiacong/PIDNet/issues/30 ("load 0 parameters"), models/pidnet.py's
get_seg_model in XuJiacong/PIDNet.

The loader filters the checkpoint to the keys (and shapes) of model.state_dict(), updates the model's own
dict with what is left and loads that with strict=False. The checkpoint was saved from the training
wrapper (keys 'model.*'), so the filter keeps nothing, the load "succeeds" and the network stays random;
the log says "Loaded 0 parameters!". A small stand-in network; the checkpoint is a real torch.save file.
"""
import io
import logging

import torch
from torch import nn

logging.basicConfig(level=logging.INFO)
torch.manual_seed(0)


def make_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 19, 1))


class FullModel(nn.Module):  # the training wrapper: its state dict prefixes every key with "model."
    def __init__(self, model):
        super().__init__()
        self.model = model


trained = FullModel(make_net())
file = io.BytesIO()
torch.save({"state_dict": trained.state_dict(), "epoch": 484}, file)
file.seek(0)

model = make_net()
pretrained_state = torch.load(file, map_location='cpu', weights_only=True)['state_dict']
model_dict = model.state_dict()
pretrained_state = {k: v for k, v in pretrained_state.items() if (k in model_dict and v.shape == model_dict[k].shape)}
model_dict.update(pretrained_state)
msg = 'Loaded {} parameters!'.format(len(pretrained_state))
logging.info(msg)
model.load_state_dict(model_dict, strict=False)  # expect: state-dict-mismatch
