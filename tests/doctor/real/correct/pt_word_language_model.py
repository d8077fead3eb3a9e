"""Source: pytorch/examples, word_language_model/main.py and model.py (commit cd01f93000a6679e768700dd29e417a1e5fd10e5).

The LSTM language model: batchify, get_batch, repackage_hidden (detach the hidden state between
batches), clip_grad_norm_, the hand-written SGD update `p.data.add_(p.grad, alpha=-lr)`, evaluation under
model.eval() and torch.no_grad(). A random corpus of token ids stands in for Wikitext-2; small sizes.
"""
import math

import torch
import torch.nn as nn

torch.manual_seed(1111)
device = torch.device("cpu")
ntokens, emsize, nhid, nlayers, bptt, clip, lr = 50, 16, 16, 2, 8, 0.25, 20.0
train_ids = torch.randint(0, ntokens, (400,))
val_ids = torch.randint(0, ntokens, (120,))


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


train_data = batchify(train_ids, 10)
val_data = batchify(val_ids, 10)
model = RNNModel(ntokens, emsize, nhid, nlayers).to(device)
criterion = nn.NLLLoss()


def evaluate(data_source):
    model.eval()
    total_loss = 0.
    hidden = model.init_hidden(10)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    model.train()
    total_loss = 0.
    hidden = model.init_hidden(10)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
    return total_loss / (batch + 1)


for epoch in range(1, 3):
    train_loss = train()
    val_loss = evaluate(val_data)
    print('| end of epoch {:3d} | train loss {:5.2f} | valid ppl {:8.2f}'.format(epoch, train_loss,
                                                                                math.exp(val_loss)))
