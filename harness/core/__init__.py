"""The house's plumbing: errors, optional extras, clocks, JSONL, the HTTP layer, Prometheus text, stop flags and command-line options derived from a pydantic model. Imports nothing above it."""
