"""The eight policies: one protocol, one registry, one evaluation path."""
