"""Source: https://github.com/mks0601/3DMPPE_POSENET_RELEASE/issues/41 ("Unexpected Keys in state_dict when
running on CPU"): the user's modelLoader builds the network, torch.load()s the released snapshot and calls
model.load_state_dict(ckpt['network']); every key has the 'module.' prefix because the snapshot was saved
from a DataParallel model. A small stand-in for get_pose_net; the snapshot is a real torch.save file.
"""
import io

import torch
from torch import nn


def get_pose_net(joint_num):
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.ConvTranspose2d(16, 16, 4, 2, 1), nn.Conv2d(16, joint_num, 1))


torch.manual_seed(0)
snapshot = io.BytesIO()
# what torch.save of a DataParallel model's state_dict() holds: every key starts with "module."
trained = {f"module.{k}": v for k, v in get_pose_net(18).state_dict().items()}
torch.save({"epoch": 24, "network": trained}, snapshot)
snapshot.seek(0)


def modelLoader(modelpath, joint_num):
    model = get_pose_net(joint_num)
    ckpt = torch.load(modelpath, weights_only=True)
    model.load_state_dict(ckpt['network'])  # expect: state-dict-mismatch
    model.eval()
    return model


model = modelLoader(snapshot, 18)
