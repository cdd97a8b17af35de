"""``harness serve``: an OpenAI-compatible front that holds the GPU in its energy band by routing between engine instances."""
