"""Energy-aware speculative decoding harness: sweep, telemetry, twin, datasets."""

__version__ = "0.1.0"
