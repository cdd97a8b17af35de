"""GPU loads for the check (torch): a sustained bf16 matmul, a duty-cycle ramp and a decode-shaped (memory-bound)
GEMV. Without CUDA they run a small float32 CPU STAND-IN (named so in every result): it exercises the check's logic,
not a GPU."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class LoadResult:
    kind: str
    seconds: float
    steps: int
    device: str
    stand_in: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "seconds": round(self.seconds, 3),
            "steps": self.steps,
            "device": self.device,
            "stand_in": self.stand_in,
            "steps_per_s": round(self.steps / self.seconds, 3) if self.seconds > 0 else None,
        }


class Loads:
    """Tensors allocated once; ``run_*`` block for the given seconds and count completed steps."""

    def __init__(self, cuda_index: int = 0, force_cpu: bool = False) -> None:
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available() and not force_cpu
        self.device = f"cuda:{cuda_index}" if self.cuda else "cpu"
        self.stand_in = not self.cuda
        dt = torch.bfloat16 if self.cuda else torch.float32
        n = 8192 if self.cuda else 256
        self.a = torch.randn(n, n, device=self.device, dtype=dt)
        self.b = torch.randn(n, n, device=self.device, dtype=dt)
        self.matmul_flops = 2.0 * n**3
        # decode-shaped: 4 weight matrices (like one layer's MLP of a 70B-class model: 8192 x 28672), ~1.9 GB in bf16
        rows, cols = (28672, 8192) if self.cuda else (512, 256)
        self.weights = [torch.randn(rows, cols, device=self.device, dtype=dt) for _ in range(4)]
        self.cols = cols
        self.weight_bytes = sum(w.numel() * w.element_size() for w in self.weights)
        self._x: dict[int, Any] = {}
        self.sync()

    @property
    def name(self) -> str:
        return self.device if self.cuda else "cpu (torch-CPU STAND-IN for the GPU load)"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _timed(self, kind: str, seconds: float, step: Callable[[], None], per_sync: int) -> LoadResult:
        t0 = time.monotonic()
        steps = 0
        while time.monotonic() - t0 < seconds:
            for _ in range(per_sync):
                step()
            self.sync()
            steps += per_sync
        return LoadResult(kind, time.monotonic() - t0, steps, self.name, self.stand_in)

    def matmul(self, seconds: float) -> LoadResult:
        def step() -> None:
            self.torch.matmul(self.a, self.b)

        return self._timed(
            "matmul_bf16" if self.cuda else "matmul_f32_cpu_stand_in", seconds, step, 8 if self.cuda else 1
        )

    def decode(self, seconds: float, batch: int) -> LoadResult:
        """One step = a batch of ``batch`` token vectors through every weight matrix (reads all weights once)."""
        if batch not in self._x:
            self._x[batch] = self.torch.randn(batch, self.cols, device=self.device, dtype=self.a.dtype)
        x = self._x[batch]

        def step() -> None:
            for w in self.weights:
                self.torch.matmul(x, w.t())

        return self._timed(f"decode_gemv_b{batch}", seconds, step, 16 if self.cuda else 1)

    def ramp(self, seconds: float, levels: int = 5, period_s: float = 0.1) -> list[tuple[float, float, float]]:
        """Duty cycle 1/levels .. 1 in equal steps; (start mono s, end mono s, duty) per level."""
        out: list[tuple[float, float, float]] = []
        per = seconds / levels
        for k in range(1, levels + 1):
            duty = k / levels
            t0 = time.monotonic()
            while time.monotonic() - t0 < per:
                p0 = time.monotonic()
                while time.monotonic() - p0 < duty * period_s:
                    self.torch.matmul(self.a, self.b)
                    self.sync()
                rest = period_s - (time.monotonic() - p0)
                if rest > 0:
                    time.sleep(rest)
            out.append((t0, time.monotonic(), duty))
        return out
