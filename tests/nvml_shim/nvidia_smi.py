"""A STAND-IN for ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits -i N`` for tests without a GPU: it asks
the NVML library it loads (the shim, via LD_LIBRARY_PATH) through nvidia-ml-py, as nvidia-smi asks the driver's.
Only the fields the GPU check queries: power.draw (nvmlDeviceGetPowerUsage), power.draw.instant (the instant-power
field), power.limit, clocks.sm. Any other field fails like nvidia-smi does (exit 2, "is not a valid field")."""

from __future__ import annotations

import sys

import pynvml as nv


def main(argv: list[str]) -> int:
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), "")
    index = int(argv[argv.index("-i") + 1]) if "-i" in argv else 0
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(index)

    def instant() -> float:
        v = nv.nvmlDeviceGetFieldValues(h, [(nv.NVML_FI_DEV_POWER_INSTANT, 0)])[0]
        return float(v.value.uiVal) / 1000.0

    readers = {"power.draw": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0, "power.draw.instant": instant,
               "power.limit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
               "clocks.sm": lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))}  # fmt: skip
    fields = [f for f in query.split(",") if f]
    bad = [f for f in fields if f not in readers]
    if bad:
        print(f'Field "{bad[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    print(", ".join(f"{readers[f]():.2f}" for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
