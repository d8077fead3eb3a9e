"""Pattern: https://github.com/pytorch/examples (reinforcement_learning/reinforce.py): REINFORCE as that
example does it, written here from scratch (no code taken from it).

Practices exercised: a policy network with Dropout called once per environment step in training mode,
actions sampled from a Categorical, log-probabilities kept in a list until the episode ends (many
forwards, one backward), discounted returns normalised with an epsilon, one optimizer step per episode,
and the episode buffers emptied in place (del buffer[:]). A tiny deterministic environment with the
reset()/step() interface of gym's CartPole stands in for gym.
"""
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical


class Balance:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.t, self.state = 0, self.rng.uniform(-0.05, 0.05, 4)
        return self.state

    def step(self, action):
        self.t += 1
        push = 0.05 if action == 1 else -0.05
        self.state = self.state + push * np.array([1.0, 0.5, -1.0, 0.5]) + 0.01 * self.state[::-1]
        return self.state, 1.0, bool(abs(self.state[0]) > 0.3 or self.t >= 25)


torch.manual_seed(21)
policy = nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.5), nn.ReLU(), nn.Linear(64, 2), nn.Softmax(dim=-1))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
log_probs, rewards = [], []
eps, discount = float(np.finfo(np.float32).eps), 0.99
env = Balance(21)


def act(state):
    dist = Categorical(policy(torch.as_tensor(state, dtype=torch.float32)[None]))
    action = dist.sample()
    log_probs.append(dist.log_prob(action))
    return action.item()


def learn():
    returns, running = [], 0.0
    for r in reversed(rewards):
        running = r + discount * running
        returns.append(running)
    returns = torch.tensor(returns[::-1])
    returns = (returns - returns.mean()) / (returns.std() + eps)
    optimizer.zero_grad()
    loss = torch.cat([-lp * g for lp, g in zip(log_probs, returns)]).sum()
    loss.backward()
    optimizer.step()
    del log_probs[:]
    del rewards[:]


for episode in range(5):
    state, done, total = env.reset(), False, 0.0
    while not done:
        state, reward, done = env.step(act(state))
        rewards.append(reward)
        total += reward
    learn()
    print("episode", episode, "reward", total)
