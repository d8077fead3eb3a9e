"""Pattern: https://github.com/pytorch/examples (word_language_model/main.py, model.py): an LSTM language
model trained with truncated backpropagation through time, written here from scratch (no code taken
from it).

Practices exercised: the token stream cut into parallel columns (batchify), windows of bptt steps with
targets shifted by one, the hidden state carried across windows and detached at the start of each one
(truncated BPTT), the initial state made with weight.new_zeros, dropout around a two-layer LSTM,
clip_grad_norm_ before a hand-written SGD update `p.data.add_(p.grad, alpha=-lr)` (no optimizer), and
evaluation under model.eval() + torch.no_grad() that also carries its (detached) state.
"""
import math

import torch
from torch import nn

torch.manual_seed(13)
VOCAB, EMB, HIDDEN, LAYERS, BPTT, COLUMNS = 40, 12, 16, 2, 6, 8


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.3)
        self.embed = nn.Embedding(VOCAB, EMB)
        self.lstm = nn.LSTM(EMB, HIDDEN, LAYERS, dropout=0.3)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens, state):
        hidden, state = self.lstm(self.drop(self.embed(tokens)), state)
        return torch.log_softmax(self.out(self.drop(hidden)).flatten(0, 1), dim=-1), state

    def first_state(self, columns):
        weight = next(self.parameters())
        return tuple(weight.new_zeros(LAYERS, columns, HIDDEN) for _ in range(2))


def columns_of(stream):
    usable = stream.numel() // COLUMNS * COLUMNS
    return stream[:usable].view(COLUMNS, -1).t().contiguous()


def window(data, start):
    length = min(BPTT, data.shape[0] - 1 - start)
    return data[start:start + length], data[start + 1:start + 1 + length].flatten()


def cut(state):
    return tuple(s.detach() for s in state)


train_data, val_data = columns_of(torch.randint(0, VOCAB, (360,))), columns_of(torch.randint(0, VOCAB, (120,)))
model = LanguageModel()
nll = nn.NLLLoss()
lr = 10.0


def train_epoch():
    model.train()
    state, total, count = model.first_state(COLUMNS), 0.0, 0
    for start in range(0, train_data.shape[0] - 1, BPTT):
        x, y = window(train_data, start)
        state = cut(state)  # keep the values, forget how they were computed
        model.zero_grad()
        log_probs, state = model(x, state)
        loss = nll(log_probs, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total, count = total + loss.item(), count + 1
    return total / count


def evaluate(data):
    model.eval()
    state, total = model.first_state(COLUMNS), 0.0
    with torch.no_grad():
        for start in range(0, data.shape[0] - 1, BPTT):
            x, y = window(data, start)
            log_probs, state = model(x, state)
            state = cut(state)
            total += len(x) * nll(log_probs, y).item()
    return total / (data.shape[0] - 1)


for epoch in range(2):
    print(epoch, train_epoch(), math.exp(evaluate(val_data)))
