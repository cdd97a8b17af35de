"""The published networks and one minibatch training loop shared by mlp_bandit, cql and bcq.

QNetwork: Linear(4,128) - GELU - Linear(128,128) - GELU - Linear(128,19) in ``net`` (state-dict keys ``net.0.*``,
``net.2.*``, ``net.4.*``). BehaviorNetwork: Linear(4,128) - GELU - Linear(128,19) in ``net``. Training: AdamW
lr 1e-3, minibatch 8, a seeded shuffle per epoch, one CPU thread (tiny nets run fastest single-threaded).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from policies.contract import N_ACTIONS, STATE_DIM, PolicyDataset
from policies.losses import Loss


class QNetwork(nn.Module):
    """Action values Q(s, .) for the 19 actions."""

    def __init__(self, state_dim: int = STATE_DIM, n_actions: int = N_ACTIONS, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_actions)
        )

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


def train(
    net: nn.Module, data: PolicyDataset, loss: Loss, *, epochs: int, seed: int, batch_size: int = 8, lr: float = 1e-3
) -> None:
    """Minibatch AdamW over ``data`` for ``epochs`` (seeded shuffle per epoch); deterministic for a seed."""
    train_batched([net], [data], loss, epochs=epochs, seeds=[seed], batch_size=batch_size, lr=lr)


def predict(net: nn.Module, states: np.ndarray) -> np.ndarray:
    """Network outputs for a (n, 4) state array as float64 numpy."""
    with torch.no_grad():
        return net(torch.as_tensor(np.atleast_2d(states), dtype=torch.float32)).double().numpy()


def data_values(out: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Q(s, a) of the logged actions."""
    return out.gather(1, a[:, None]).squeeze(1)


def _linear_layers(net: nn.Module) -> list[tuple[int, nn.Linear]]:
    layers: nn.Sequential = net.net  # type: ignore[assignment]  # nn.Module's __getattr__ is typed Tensor | Module
    return [(i, m) for i, m in enumerate(layers) if isinstance(m, nn.Linear)]


SQRT_HALF = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327


def _gelu_grad(z: torch.Tensor) -> torch.Tensor:
    """d gelu(z) / dz for the exact (erf) GELU."""
    return 0.5 * (1.0 + torch.erf(z * SQRT_HALF)) + z * torch.exp(-0.5 * z * z) * INV_SQRT_2PI


def forward_backward(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], x: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor,
                     loss: Loss) -> None:  # fmt: skip
    """Forward a stacked Linear/GELU MLP (weights (M, in, out), biases (M, 1, out)) and set each parameter's ``grad``
    by hand-written backpropagation of ``loss`` (no autograd graph).

    Kept because it pays: ``benchmarks/train_all.py --gradients hand,func,autograd`` measured the neural algorithms'
    train + evaluate at 36.4 s CPU by hand, 139.0 s with torch.func vmap + grad (3.8x), 71.9 s with autograd (2.0x),
    same picks and figures (docs/policies.md, "Benchmark")."""
    pre, act = [], [x]
    h = x
    last = len(weights) - 1
    for j, (w, b) in enumerate(zip(weights, biases)):
        z = torch.baddbmm(b, h, w)
        if j != last:
            pre.append(z)
            h = torch.nn.functional.gelu(z)
            act.append(h)
        else:
            h = z
    g = loss.grad(h, onehot, r)
    for j in range(last, -1, -1):
        weights[j].grad = torch.bmm(act[j].transpose(1, 2), g)
        biases[j].grad = g.sum(1, keepdim=True)
        if j:
            g = torch.bmm(g, weights[j].transpose(1, 2)) * _gelu_grad(pre[j - 1])


def _mlp(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The stacked Linear/GELU MLP's output; works batched (weights (M, in, out)) and per member under vmap."""
    h = x
    for j, (w, b) in enumerate(zip(weights, biases)):
        h = b + h @ w
        if j != len(weights) - 1:
            h = torch.nn.functional.gelu(h)
    return h


GRADIENTS = "hand"
"""How ``train_batched`` computes gradients: ``hand`` (``forward_backward``), ``func`` (torch.func vmap + grad) or
``autograd`` (one backward through the stacked forward). Set by ``benchmarks/train_all.py --gradients``."""


def _func_step(loss: Loss) -> Callable[..., None]:
    """A step that sets each stacked parameter's ``grad`` by torch.func: vmap over members of grad of the member's loss."""
    per_member = torch.func.vmap(
        torch.func.grad(lambda ws, bs, x, oh, r: loss.value(_mlp(ws, bs, x), oh, r), argnums=(0, 1))
    )

    def step(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], x: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor,
             loss: Loss) -> None:  # fmt: skip
        gw, gb = per_member(tuple(weights), tuple(biases), x, onehot, r)
        for p, g in zip([*weights, *biases], [*gw, *gb]):
            p.grad = g

    return step


def _autograd_step(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor], x: torch.Tensor, onehot: torch.Tensor, r: torch.Tensor,
                   loss: Loss) -> None:  # fmt: skip
    """Autograd through the stacked forward: M x the mean over (M, b) is the sum of the members' own mean losses."""
    params = [*weights, *biases]
    with torch.enable_grad():
        value = loss.value(_mlp(weights, biases, x), onehot, r) * x.shape[0]
        grads = torch.autograd.grad(value, params)
    for p, g in zip(params, grads):
        p.grad = g


def _gradient_step(loss: Loss) -> Callable[..., None]:
    """The step that sets the stacked parameters' gradients, as ``GRADIENTS`` chooses."""
    if GRADIENTS == "hand":
        return forward_backward
    if GRADIENTS == "func":
        return _func_step(loss)
    if GRADIENTS == "autograd":
        return _autograd_step
    raise ValueError(f"policies.nets.GRADIENTS is {GRADIENTS!r}; expected hand, func or autograd")


def train_batched(nets: list[nn.Module], datasets: list[PolicyDataset], loss: Loss, *, epochs: int, seeds: list[int] | None = None,
                  batch_size: int = 8, lr: float = 1e-3, generators: list[torch.Generator] | None = None) -> None:  # fmt: skip
    """Train M same-architecture Linear/GELU nets on M same-size datasets in one loop (batched matmuls).

    Member m sees exactly what ``train(nets[m], datasets[m], loss, epochs, seeds[m])`` would: the same initial
    weights, the same minibatch order, per-element AdamW; each member's gradient
    is that of its own mean loss. Results equal separate training up to float rounding (tested). Used for the
    leave-one-repeat-out folds, which all have the same size on a full grid, and (M = 1) for every single fit.
    Gradients are hand-derived (``forward_backward``), checked against autograd in the tests. The shuffle comes from
    ``generators`` when given (they advance, so a second phase can continue the same stream) or fresh ones per seed.
    """
    n = len(datasets[0])
    if any(len(d) != n for d in datasets):
        raise ValueError("train_batched needs datasets of equal size")
    layers = [_linear_layers(net) for net in nets]
    weights = [nn.Parameter(torch.stack([ls[j][1].weight.detach().T for ls in layers])) for j in range(len(layers[0]))]
    biases = [
        nn.Parameter(torch.stack([ls[j][1].bias.detach() for ls in layers])[:, None, :]) for j in range(len(layers[0]))
    ]
    opt = torch.optim.AdamW([*weights, *biases], lr=lr, fused=True)
    xs, acts, rs = (torch.stack(t) for t in zip(*(tensors(d) for d in datasets)))
    gens = generators if generators is not None else [torch.Generator().manual_seed(s) for s in seeds or []]
    if len(gens) != len(nets):
        raise ValueError("train_batched needs one seed or generator per net")
    step = _gradient_step(loss)
    with torch.no_grad():
        for _ in range(epochs):
            perm = torch.stack([torch.randperm(n, generator=g) for g in gens])  # (M, n)
            x_ep = torch.take_along_dim(xs, perm[..., None], dim=1)
            oh_ep = torch.nn.functional.one_hot(torch.take_along_dim(acts, perm, dim=1), N_ACTIONS).to(xs.dtype)
            r_ep = torch.take_along_dim(rs, perm, dim=1)
            for start in range(0, n, batch_size):
                end = start + batch_size
                step(weights, biases, x_ep[:, start:end], oh_ep[:, start:end], r_ep[:, start:end], loss)
                opt.step()
    with torch.no_grad():
        for m, ls in enumerate(layers):
            for j, (_, lin) in enumerate(ls):
                lin.weight.copy_(weights[j][m].T)
                lin.bias.copy_(biases[j][m, 0])
    for net in nets:
        net.eval()
