"""Training losses of the neural policies, each with its value and its hand-derived gradient w.r.t. the net output.

Values are means over the rows of a minibatch (what the published scripts and d3rlpy minimise); ``grad`` returns
d value / d output for outputs shaped (..., b, 19), so the batched trainer can skip autograd (tested against autograd).
The hand-derived gradients stay because they pay: 3.8x less CPU than torch.func vmap + grad and 2.0x less than
autograd in ``benchmarks/train_all.py --gradients hand,func,autograd`` (docs/policies.md, "Benchmark").
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def _data_values(out: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    return (out * onehot).sum(-1)


class Loss:
    """A minibatch loss on the network output ``out`` (..., b, 19), logged actions (one-hot) and rewards (..., b)."""

    def value(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def grad(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class MSE(Loss):
    """mean (Q(s,a) - r)^2 (mlp_bandit)."""

    def value(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return ((_data_values(out, onehot) - r) ** 2).mean()

    def grad(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (2.0 * (_data_values(out, onehot) - r) / r.shape[-1])[..., None] * onehot


class Huber(Loss):
    """mean smooth-L1 (beta 1) of Q(s,a) - r: d3rlpy's DQN loss with gamma 0."""

    def value(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(_data_values(out, onehot), r)

    def grad(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (torch.clamp(_data_values(out, onehot) - r, -1.0, 1.0) / r.shape[-1])[..., None] * onehot


class CrossEntropy(Loss):
    """mean -log softmax(out)[a]: the behaviour-cloning loss of BCQ's imitator (rewards unused)."""

    def value(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return -(torch.log_softmax(out, -1) * onehot).sum(-1).mean()

    def grad(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (torch.softmax(out, -1) - onehot) / out.shape[-2]


TD_LOSSES: dict[str, type[Loss]] = {"mse": MSE, "huber": Huber}
"""The regression losses a Q net may fit r with: ``mse`` (the published scripts) or ``huber`` (d3rlpy)."""


class CQL(Loss):
    """td(Q(s,a), r) + alpha * mean(logsumexp_a' Q(s,a') - Q(s,a)) with td = MSE (the published 06_cql.py) or Huber
    (d3rlpy's DiscreteCQL with gamma 0). Huber is half the MSE while |Q - r| < 1 (always, for rewards in [0, 1]), so
    with Huber the same alpha weighs the penalty twice as much against the fit."""

    def __init__(self, alpha: float, td: str = "mse") -> None:
        self.alpha = alpha
        self.td = TD_LOSSES[td]()

    def value(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (
            self.td.value(out, onehot, r) + self.alpha * (torch.logsumexp(out, -1) - _data_values(out, onehot)).mean()
        )

    def grad(self, out: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.td.grad(out, onehot, r) + self.alpha * (torch.softmax(out, -1) - onehot) / out.shape[-2]
