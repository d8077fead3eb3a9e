"""Source: https://github.com/rasbt/LLMs-from-scratch/issues/580 (ch05/10_llm-training-speed/01_opt_single_gpu.py
line 507 at commit b7893457da9fe66ebe04aebbb9797e598f7f0e91): the model was trained after
model = torch.compile(model), saved with torch.save(model.state_dict(), "model.pth"), and reloading with
model.load_state_dict(torch.load("model.pth", weights_only=True)) fails: every key has the prefix
'_orig_mod.'. A small GPT-like stand-in; the '_orig_mod.' keys are what a compiled module's state_dict() has.
"""
import os
import tempfile

import torch
from torch import nn


class GPTModel(nn.Module):
    def __init__(self, vocab=50, emb=16):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, emb)
        self.pos_emb = nn.Embedding(8, emb)
        self.out_head = nn.Linear(emb, vocab, bias=False)

    def forward(self, idx):
        return self.out_head(self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1])))


torch.manual_seed(123)
folder = tempfile.mkdtemp()
path = os.path.join(folder, "model.pth")
trained = GPTModel()
torch.save({f"_orig_mod.{k}": v for k, v in trained.state_dict().items()}, path)  # compiled model's state_dict()

model = GPTModel()
try:
    model.load_state_dict(torch.load(path, weights_only=True))  # expect: state-dict-mismatch
finally:
    os.remove(path)
    os.rmdir(folder)
