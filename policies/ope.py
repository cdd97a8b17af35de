"""Off-policy estimators for a one-step bandit log, hand-written (checked against obp 0.4.1 in the tests).

Inputs: ``reward`` (n,), logged ``action`` (n,), logging propensity ``pscore`` (n,) of the logged action, the target
policy's ``action_dist`` (n, K) (one-hot rows for a deterministic policy) and, for DM/DR, ``q_hat`` (n, K).
"""

from __future__ import annotations

import numpy as np


def importance_weights(action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray) -> np.ndarray:
    return action_dist[np.arange(len(action)), action] / pscore


def ips(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray) -> float:
    """Inverse propensity scoring: mean(w r)."""
    return float(np.mean(importance_weights(action, pscore, action_dist) * reward))


def snips(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray) -> float:
    """Self-normalised IPS: sum(w r) / sum(w) (0 when no logged action matches the target policy)."""
    w = importance_weights(action, pscore, action_dist)
    return float(np.sum(w * reward) / np.sum(w)) if np.sum(w) > 0 else 0.0


def dm(q_hat: np.ndarray, action_dist: np.ndarray) -> float:
    """Direct method: mean over rows of sum_k pi(k|x) q(x, k)."""
    return float(np.mean(np.sum(action_dist * q_hat, axis=1)))


def dr(reward: np.ndarray, action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray, q_hat: np.ndarray) -> float:
    """Doubly robust: DM plus the importance-weighted residual of the logged action."""
    w = importance_weights(action, pscore, action_dist)
    q_logged = q_hat[np.arange(len(action)), action]
    return float(np.mean(np.sum(action_dist * q_hat, axis=1) + w * (reward - q_logged)))


def one_hot(actions: np.ndarray, n_actions: int) -> np.ndarray:
    out = np.zeros((len(actions), n_actions))
    out[np.arange(len(actions)), actions] = 1.0
    return out


def bootstrap_ci(values: np.ndarray, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return (float(v.mean()), float(v.mean())) if len(v) else (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)
