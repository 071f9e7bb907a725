"""The checkpoint manager a framework surface works on: one it was given, or one it opens."""

from __future__ import annotations

from typing import Any

from ..manager.facade import CheckpointManager
from ..errors import InvalidInputError


def manager_for(owner: str, location: Any, options: dict) -> tuple[CheckpointManager, bool]:
    """Return ``(manager, own)`` for a surface constructed with ``location`` and ``options``.

    Args:
        owner: the surface's class name, named in the error (e.g. ``"SnapstoreSaver"``).
        location: a :class:`CheckpointManager` (used as it is), or what ``CheckpointManager`` takes
            (a path, an ``s3://`` URL, a store, or None for the default).
        options: keyword options for a manager the surface opens itself.
    Returns:
        The manager, and whether the surface opened it (and so closes it).
    Raises:
        InvalidInputError: ``options`` given together with a manager.
        Whatever ``CheckpointManager(location, **options)`` raises.
    """
    if isinstance(location, CheckpointManager):
        if options:
            raise InvalidInputError(f"{owner}: options are for a manager it opens, not one passed in")
        return location, False
    return CheckpointManager(location, **options), True
