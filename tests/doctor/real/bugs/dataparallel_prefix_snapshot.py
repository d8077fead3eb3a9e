"""Pattern: https://github.com/mks0601/3DMPPE_POSENET_RELEASE/issues/41 ("Unexpected keys in state_dict
when running on CPU": the released snapshot was saved from a DataParallel model, so its 'network' entry
has keys 'module.*', and a plain model's load_state_dict rejects them). Written here from scratch.
"""
import io

import torch
from torch import nn


def pose_net(joints):
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.ConvTranspose2d(8, 8, 4, 2, 1), nn.Conv2d(8, joints, 1))


def load_snapshot(source, joints):
    net = pose_net(joints)
    snapshot = torch.load(source, weights_only=True)
    net.load_state_dict(snapshot["network"])  # expect: state-dict-mismatch
    return net.eval()


torch.manual_seed(8)
file = io.BytesIO()
# what a DataParallel model's state_dict() holds: every key behind "module."
torch.save({"epoch": 24, "network": {"module." + k: v for k, v in pose_net(17).state_dict().items()}}, file)
file.seek(0)
load_snapshot(file, 17)
