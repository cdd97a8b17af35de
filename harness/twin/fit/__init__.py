"""Fitting twin profiles: to the published measurements and to a run folder's own rows."""
