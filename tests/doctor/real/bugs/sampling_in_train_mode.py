"""Pattern: https://github.com/karpathy/makemore (the training script prints samples from the model every
few hundred steps through a generate function): here the samples are drawn while the model is still in
training mode, with Dropout active, and without torch.no_grad(), so every sampled token builds a graph
that nothing uses. Written here from scratch: a character MLP over a context of 3 tokens.
"""
import torch
from torch import nn

torch.manual_seed(15)
VOCAB, CONTEXT = 27, 3
model = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Flatten(), nn.Linear(8 * CONTEXT, 64), nn.Tanh(), nn.Dropout(0.2),
                      nn.Linear(64, VOCAB))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
words = torch.randint(1, VOCAB, (400, CONTEXT + 1))


def generate(net, length=8):
    context, out = [0] * CONTEXT, []
    for _ in range(length):
        probs = net(torch.tensor([context])).softmax(dim=-1)
        token = torch.multinomial(probs, 1).item()
        context = context[1:] + [token]
        out.append(token)
    return out


for step in range(40):
    batch = words[torch.randint(0, 400, (32,))]
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(batch[:, :CONTEXT]), batch[:, CONTEXT]).backward()
    optimizer.step()
    if step % 20 == 19:
        print(step, generate(model))  # expect: eval-mode
