"""The twin GPU device: state, history, board settings and its HTTP contract."""
