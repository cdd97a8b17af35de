"""The twin engine: an sglang- or vLLM-compatible server on the twin clock."""
