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


def train(net: nn.Module, data: PolicyDataset, loss_fn: LossFn, *, epochs: int, seed: int, batch_size: int = 8, lr: float = 1e-3) -> None:
    """Minibatch AdamW over ``data`` for ``epochs`` (seeded shuffle per epoch); deterministic for a seed."""
    train_batched([net], [data], loss_fn, epochs=epochs, seeds=[seed], batch_size=batch_size, lr=lr)


def predict(net: nn.Module, states: np.ndarray) -> np.ndarray:
    """Network outputs for a (n, 4) state array as float64 numpy."""
    with torch.no_grad():
        return net(torch.as_tensor(np.atleast_2d(states), dtype=torch.float32)).double().numpy()


def data_values(out: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Q(s, a) of the logged actions."""
    return out.gather(1, a[:, None]).squeeze(1)


def _linear_layers(net: nn.Module) -> list[tuple[int, nn.Linear]]:
    return [(i, m) for i, m in enumerate(net.net) if isinstance(m, nn.Linear)]


def train_batched(nets: list[nn.Module], datasets: list[PolicyDataset], loss_fn: LossFn, *, epochs: int, seeds: list[int],
                  batch_size: int = 8, lr: float = 1e-3) -> None:  # fmt: skip
    """Train M same-architecture Linear/GELU nets on M same-size datasets in one loop (batched matmuls).

    Member m sees exactly what ``train(nets[m], datasets[m], loss_fn, epochs, seeds[m])`` would: the same initial
    weights, the same minibatch order, per-element AdamW; the loss is the sum of the members' mean losses, so each
    member's gradient is its own. Results equal separate training up to float rounding (tested). Used for the
    leave-one-repeat-out folds, which all have the same size on a full grid.
    """
    n = len(datasets[0])
    if any(len(d) != n for d in datasets):
        raise ValueError("train_batched needs datasets of equal size")
    m_count = len(nets)
    layers = [_linear_layers(net) for net in nets]
    weights = [nn.Parameter(torch.stack([ls[j][1].weight.detach().T for ls in layers])) for j in range(len(layers[0]))]
    biases = [nn.Parameter(torch.stack([ls[j][1].bias.detach() for ls in layers])[:, None, :]) for j in range(len(layers[0]))]
    opt = torch.optim.AdamW([*weights, *biases], lr=lr, fused=True)
    xs, acts, rs = (torch.stack(t) for t in zip(*(tensors(d) for d in datasets)))
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    last = len(weights) - 1
    pairs = list(zip(weights, biases))
    for _ in range(epochs):
        perm = torch.stack([torch.randperm(n, generator=g) for g in gens])  # (M, n)
        x_ep, a_ep, r_ep = torch.take_along_dim(xs, perm[..., None], dim=1), torch.take_along_dim(acts, perm, dim=1), torch.take_along_dim(rs, perm, dim=1)
        for start in range(0, n, batch_size):
            h = x_ep[:, start : start + batch_size]
            for j, (w, b) in enumerate(pairs):
                h = torch.baddbmm(b, h, w)
                if j != last:
                    h = torch.nn.functional.gelu(h)
            loss = loss_fn(h.reshape(-1, h.shape[-1]), a_ep[:, start : start + batch_size].reshape(-1), r_ep[:, start : start + batch_size].reshape(-1))
            if m_count > 1:
                loss = loss * m_count
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        for m, ls in enumerate(layers):
            for j, (_, lin) in enumerate(ls):
                lin.weight.copy_(weights[j][m].T)
                lin.bias.copy_(biases[j][m, 0])
    for net in nets:
        net.eval()
