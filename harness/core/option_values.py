"""Option values that check themselves: one check per value, whatever door it comes through.

A value reaches an options model through four doors: a command-line flag (its text), a ``--config`` file (the same
text, or a YAML list or number), a resumed run's manifest (the JSON the model dumped) and the Python API. Each value
type here (and the domain ones built on ``checked_by``: ``harness.grid.BatchSizes``, ``harness.gpu.power_cap.PowerCaps``
...) runs the one check of that value at validation time, so a bad value is refused with the same message and fix at
every door; ``harness.core.model_options.option_error`` turns the refusal into a ``UsageError`` naming the flag.

A check takes the value in any form a door gives it (``"1,4"`` or ``[1, 4]``), returns its canonical form, and raises
a ``HarnessError`` whose message names the value the same way for every form (a list is shown as its flag text).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Callable, Sequence

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

from harness.core.errors import HarnessError, MissingFileError, UsageError

OPTION_VALUE = "option_value"
"""The pydantic error type of a value's own check (its context carries the ``fix``)."""


def refusal(err: HarnessError) -> PydanticCustomError:
    """A check's ``HarnessError`` as the pydantic error the model raises (message and fix kept verbatim)."""
    return PydanticCustomError(
        OPTION_VALUE, "{message}", {"message": err.message, "fix": err.fix or "", "exit_code": err.exit_code}
    )


def checked_by(check: Callable[[Any], Any]) -> BeforeValidator:
    """The validator of a value type: ``check`` gets the value as the door gave it and returns its canonical form."""

    def run(value: Any) -> Any:
        try:
            return check(value)
        except HarnessError as err:
            raise refusal(err) from None

    return BeforeValidator(run)


def _item_text(item: Any) -> str:
    """One list item as its flag text: ``60`` -> ``"60"``, ``[3, 4, 8]`` -> ``"3:4:8"``; a bool or a mapping is no
    item of any list option."""
    if isinstance(item, bool) or isinstance(item, dict) or item is None:
        return repr(item)
    if isinstance(item, (list, tuple)):
        return ":".join(_item_text(x) for x in item)
    if isinstance(item, float) and item.is_integer():
        return str(int(item))
    return str(item).strip()


def list_items(
    value: Any, name: str, example: str, separators: str = ",", error: type[UsageError] = UsageError
) -> list[str]:
    """The items of a list option as flag text, from its text (``"1,4"``, ``"1, 4"``, ``"1 4"``) or a list (``[1,
    4]``). An empty item (``"1,,16"``, a trailing comma, ``""`` in a list) is refused, not skipped: a typo, not a
    wish. An empty text or list gives []."""
    if isinstance(value, str):
        if not value.strip():
            return []
        items = re.split(rf"\s*[{re.escape(separators)}]\s*|\s+", value.strip())
    elif isinstance(value, (list, tuple)):
        items = [_item_text(x) for x in value]
    else:
        raise error(f"{name} must be a list, got {value!r}", fix=f"e.g. {name} {example}")
    if "" in items:
        raise error(f"{name} {shown(items)!r} has an empty item", fix=f"e.g. {name} {example}")
    return items


def shown(items: Sequence[Any]) -> str:
    """A list option as its flag text (``[1, 4]`` -> ``"1,4"``): how every door's value is named in a message."""
    return ",".join(_item_text(x) for x in items)


def no_repeats(
    labels: Sequence[Any], name: str, what: str, note: str = "", error: type[UsageError] = UsageError
) -> None:
    """Refuse a list with an item given twice (after each item's normalisation): a typo, not a wish."""
    seen: set[Any] = set()
    for label in labels:
        if label in seen:
            raise error(f"{what} {_item_text(label)} is listed twice in {name}{note}", fix="list each one once")
        seen.add(label)


def check_http_url(value: Any, name: str) -> str:
    """An ``http(s)://host[:port]`` URL (a sampler, a twin GPU)."""
    text = value if isinstance(value, str) else ""
    if not re.match(r"^https?://[^\s/:]+(:\d{1,5})?(/\S*)?$", text):
        raise UsageError(f"{name} {value!r} is not an http(s) URL", fix=f"e.g. {name} http://127.0.0.1:18200")
    return text.rstrip("/")


def http_url(name: str) -> BeforeValidator:
    return checked_by(lambda v: v if v is None else check_http_url(v, name))


def check_band(value: Any, name: str = "--band") -> tuple[float, float]:
    """A utilization band LOW,HIGH with 0 < LOW < HIGH <= 1.5 (text ``"0.95,0.98"`` or a pair)."""
    fix = f"write it as LOW,HIGH with 0 < LOW < HIGH, e.g. {name} 0.95,0.98"
    items = list_items(value, name, "0.95,0.98")
    try:
        lo, hi = (float(x) for x in items)
    except ValueError:
        raise UsageError(f"{name} {shown(items)!r} is not two numbers LOW,HIGH", fix=fix) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi <= 1.5):
        raise UsageError(f"{name} {shown(items)!r} is not a band: it needs 0 < LOW < HIGH <= 1.5", fix=fix)
    return lo, hi


def check_fraction(value: Any, name: str, example: str) -> float:
    """A number in (0, 1) (a memory fraction)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} {value!r} is not a number", fix=f"e.g. {name} {example}") from None
    if not 0 < number < 1:
        raise UsageError(f"{name} {value!r} is not in (0, 1)", fix=f"e.g. {name} {example}")
    return number


def check_input_path(value: Any, name: str) -> Path:
    """A file or folder the command reads: it must exist when the options are built (a missing input is exit 3,
    ``MissingFileError``, at every door)."""
    path = Path(value)
    if not path.exists():
        raise MissingFileError(f"{name} {str(path)!r}: not found", fix=f"pass an existing path to {name}")
    return path


def input_path(name: str) -> BeforeValidator:
    return checked_by(lambda v: v if v is None else check_input_path(v, name))


Port = Annotated[int, Field(ge=0, le=65535)]
"""A TCP port to bind (0 picks a free one)."""
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A positive, finite duration in seconds."""
TimeScale = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""The twin world's speed-up over the wall clock."""
