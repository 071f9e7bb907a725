"""Types of a checkpoint's summary fields, checked at save (what listing and retention read).

Pure functions; no I/O.
"""

from __future__ import annotations

import math

from ..errors import InvalidMessageError

__all__ = ["validate_fields"]


def validate_fields(step=None, token_usage=None, metrics=None, status=None) -> None:
    """Check the types of a checkpoint's summary fields (what listing and retention read).

    Args:
        step: None or a non-negative ``int`` (not ``bool``).
        token_usage, metrics: None or an object (``dict`` with ``str`` keys) whose values are
            finite numbers (``int``/``float``, not ``bool``), ``None``, or objects of the same kind
            (nested usage details such as ``{"completion_tokens_details": {"reasoning_tokens": 5}}``),
            at most 8 levels deep.
        status: None or a ``str``.
    Raises:
        InvalidMessageError: naming the field, the path in it and what was wrong.
    """
    if step is not None and (type(step) is bool or not isinstance(step, int) or step < 0):
        raise InvalidMessageError(f"step must be a non-negative integer, got {_brief(step)}")
    if status is not None and not isinstance(status, str):
        raise InvalidMessageError(f"status must be a string, got {_brief(status)}")
    for name, value in (("token_usage", token_usage), ("metrics", metrics)):
        if value is None:
            continue
        stack = [(value, name, 0)]
        while stack:
            v, p, depth = stack.pop()
            if not isinstance(v, dict):
                raise InvalidMessageError(f"{p} must be an object of numbers, got {_brief(v)}")
            if depth >= 8:
                raise InvalidMessageError(f"{p}: nested deeper than 8 levels (an object of numbers)")
            for k, x in v.items():
                if not isinstance(k, str):
                    raise InvalidMessageError(f"{p}: key {k!r} is not a string")
                t = type(x)
                if x is None or t is int or (t is float and math.isfinite(x)):
                    continue
                if isinstance(x, dict):
                    stack.append((x, f"{p}[{k!r}]", depth + 1))
                elif t is not bool and isinstance(x, (int, float)) and math.isfinite(x):
                    continue
                else:
                    raise InvalidMessageError(f"{p}[{k!r}] must be a number, got {_brief(x)}")


def _brief(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
