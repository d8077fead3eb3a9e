"""Pattern: https://github.com/rasbt/LLMs-from-scratch/issues/580 (a model trained after torch.compile was
saved with model.state_dict(); loading that file into a plain model fails because every key starts with
'_orig_mod.'). Written here from scratch: a small token model, the compiled model's key names written
out, and the plain model's strict load.
"""
import os
import tempfile

import torch
from torch import nn


class TokenModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(30, 12)
        self.mix = nn.Linear(12, 12)
        self.unembed = nn.Linear(12, 30, bias=False)

    def forward(self, ids):
        return self.unembed(torch.tanh(self.mix(self.embed(ids))))


torch.manual_seed(4)
where = tempfile.mkdtemp()
weights = os.path.join(where, "weights.pt")
# what the state_dict() of torch.compile(model) holds: the original module's keys behind '_orig_mod.'
torch.save({"_orig_mod." + name: tensor for name, tensor in TokenModel().state_dict().items()}, weights)
fresh = TokenModel()
try:
    fresh.load_state_dict(torch.load(weights, weights_only=True))  # expect: state-dict-mismatch
finally:
    os.remove(weights)
    os.rmdir(where)
