"""The eight policies: one protocol, one registry, one evaluation path.

``from policies import QNetwork`` loads the published network exactly as the model card says:
``QNetwork(4, 19).load_state_dict(torch.load("mlp_bandit/policy.pth"))``. Torch is imported only when QNetwork is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QNetwork", "BehaviorNetwork"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from harness.core.extras import needs

        with needs(f"policies.{name}"):
            from policies import nets

        return getattr(nets, name)
    raise AttributeError(f"module 'policies' has no attribute {name!r}")
