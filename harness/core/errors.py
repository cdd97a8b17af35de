"""One exception family for the whole project. Each error says what went wrong and how to fix it.

The CLI maps these to exit codes and prints ``error: <message>`` and ``fix: <hint>``; nothing already written is
touched when one is raised.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class: a problem the user can act on. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message} (fix: {self.fix})"


class UsageError(HarnessError):
    """Bad flags or arguments."""

    exit_code = 2


class InvalidConfigError(UsageError):
    """A speculative triple that breaks one of sglang's rules, or an unknown config."""


class DataError(HarnessError):
    """Malformed, truncated or inconsistent input data (JSONL, datasets, result files)."""

    exit_code = 3


class MissingFileError(DataError):
    """An input file or folder that does not exist."""


class ServiceUnavailableError(HarnessError):
    """A server, sampler or twin device that cannot be reached or does not answer in time."""

    exit_code = 4


class EngineLaunchError(HarnessError):
    """An inference server that failed to start (out of memory, crashed, launch timeout)."""

    exit_code = 5


class OutputError(HarnessError):
    """An output location that cannot be written."""

    exit_code = 6


class MissingDependencyError(HarnessError):
    """An optional dependency (a pyproject extra such as ``[policies]``) that is not installed."""

    exit_code = 7
