"""Doing a sweep: checks, the runner, one session, the console, the CLI; the active strategy and the executors (local, Ray)."""
