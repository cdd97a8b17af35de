"""The published networks and one minibatch training loop shared by mlp_bandit, cql and bcq.

QNetwork: Linear(4,128) - GELU - Linear(128,128) - GELU - Linear(128,19) in ``net`` (state-dict keys ``net.0.*``,
``net.2.*``, ``net.4.*``). BehaviorNetwork: Linear(4,128) - GELU - Linear(128,19) in ``net``. Training: AdamW
lr 1e-3, minibatch 8, a seeded shuffle per epoch, one CPU thread (tiny nets run fastest single-threaded).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from policies.contract import N_ACTIONS, STATE_DIM, PolicyDataset

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(network output (B, 19), actions (B,), rewards (B,)) -> scalar loss."""


class QNetwork(nn.Module):
    """Action values Q(s, .) for the 19 actions."""

    def __init__(self, state_dim: int = STATE_DIM, n_actions: int = N_ACTIONS, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BehaviorNetwork(nn.Module):
    """Logits of the logging (behaviour) policy pi_b(a|s), used by BCQ's action filter."""

    def __init__(self, state_dim: int = STATE_DIM, n_actions: int = N_ACTIONS, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.GELU(), nn.Linear(hidden, n_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch for network init without touching the caller's global RNG state; run single-threaded."""
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def tensors(data: PolicyDataset) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(data.states, dtype=torch.float32),
        torch.as_tensor(data.actions, dtype=torch.long),
        torch.as_tensor(data.rewards, dtype=torch.float32),
    )


def train(net: nn.Module, data: PolicyDataset, loss_fn: LossFn, *, epochs: int, seed: int, batch_size: int = 8, lr: float = 1e-3) -> list[float]:
    """Minibatch AdamW over ``data`` for ``epochs``; returns the mean loss per epoch. Deterministic for a seed."""
    x, a, r = tensors(data)
    n = len(a)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, fused=True)
    history: list[float] = []
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = perm[start : start + batch_size]
            loss = loss_fn(net(x[idx]), a[idx], r[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        history.append(total / n)
    net.eval()
    return history


def predict(net: nn.Module, states: np.ndarray) -> np.ndarray:
    """Network outputs for a (n, 4) state array as float64 numpy."""
    with torch.no_grad():
        return net(torch.as_tensor(np.atleast_2d(states), dtype=torch.float32)).double().numpy()


def data_values(out: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Q(s, a) of the logged actions."""
    return out.gather(1, a[:, None]).squeeze(1)
