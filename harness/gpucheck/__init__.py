"""The GPU proof kit (``benchmarks/gpu_check.py``): one prepared check of the native path on a real GPU.

Standard library + nvidia-ml-py + torch only (the lent GPU machine has neither pydantic nor the project installed);
see docs/gpu_check.md.
"""
