"""Source: pytorch/examples, reinforcement_learning/reinforce.py (commit 2f5815e164db37800dbfac93fc3783233f7bef6b).

REINFORCE with the example's Policy (Linear-Dropout-ReLU-Linear, softmax), Categorical sampling, saved
log-probabilities, normalised discounted returns and `del policy.rewards[:]`. A tiny deterministic
stand-in for CartPole (4 observations, 2 actions) replaces gym, which is not installed.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

gamma, seed = 0.99, 543


class TinyCartPole:
    """Same interface as gym's CartPole-v1 for what the example uses: reset() and step(action)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.t, self.state = 0, self.rng.uniform(-0.05, 0.05, 4)
        return self.state, {}

    def step(self, action):
        self.t += 1
        self.state = self.state + np.array([0.02, 0.1, 0.02, 0.1]) * (1 if action else -1) * self.state[::-1]
        done = bool(abs(self.state[2]) > 0.2 or self.t >= 30)
        return self.state, 1.0, done, False, {}


env = TinyCartPole(seed)
torch.manual_seed(seed)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = []
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    running_reward = 10
    for i_episode in range(1, 6):
        state, _ = env.reset()
        ep_reward = 0
        for _ in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            state, reward, done, _, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
        print('Episode {}\tLast reward: {:.2f}\tAverage reward: {:.2f}'.format(i_episode, ep_reward, running_reward))


if __name__ == '__main__':
    main()
