"""A vLLM platform plugin (entry point group ``vllm.platform_plugins``) naming vLLM's own ``CpuPlatform``.

vLLM 0.11 picks its CPU platform only for a CPU build (a version with ``+cpu``, not on PyPI) or macOS, and its
``DeviceConfig`` then fails to infer a device while the parser is built; newer vLLM honours ``VLLM_TARGET_DEVICE=cpu``.
This is vLLM's documented out-of-tree platform hook, put on ``PYTHONPATH`` by tests/engine/test_vllm_conformance.py; the
platform class itself is vLLM's.
"""


def platform() -> str:
    """The qualified name of the platform class vLLM should activate."""
    return "vllm.platforms.cpu.CpuPlatform"
